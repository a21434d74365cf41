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


def test_containers_imports_nothing_from_launch():
    """launch/ builds on containers/ (recipes, profiles, builds); never the other way round."""
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imported_modules(p) if m.split(".")[0] == "launch")
                 for p in (REPO / "containers").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_launch_never_loads_a_framework():
    modules = sorted(p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
                     for p in (REPO / "launch").rglob("*.py") if p.name != "__init__.py")
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_launcher_and_runtime_names_are_spelled_only_by_their_registries():
    """`spec.launcher == "sbatch"` elsewhere would be a second owner of the name: modules ask
    the registry (launch.launchers.LAUNCHERS traits, launch.runtimes.RUNTIMES) instead."""
    from launch.launchers import LAUNCHERS
    from launch.runtimes import RUNTIMES

    names = set(LAUNCHERS) | set(RUNTIMES)
    owners = {REPO / "launch" / "launchers.py", REPO / "launch" / "runtimes.py"}

    def subject(node) -> str | None:
        return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None

    def constants(node) -> set[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}

    offenders = []
    for path in sorted((REPO / "launch").rglob("*.py")):
        if path in owners:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(subject(s) in ("launcher", "runtime") for s in sides) and \
                        any(constants(s) & names for s in sides):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
