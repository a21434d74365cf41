"""The rooms stay apart: bench/ imports nothing from launch/; launch/ never
imports a framework (the host that launches may have none)."""
import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_bench_imports_nothing_from_launch():
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imported_modules(p) if m.split(".")[0] == "launch")
                 for p in (REPO / "bench").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_launch_never_loads_a_framework():
    modules = sorted(p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                     for p in (REPO / "launch").rglob("*.py") if p.name != "__init__.py")
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
