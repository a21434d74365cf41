"""The rooms stay apart: bench/ imports nothing from launch/; launch/ never
imports a framework (the host that launches may have none); no two modules import
each other, however indirectly; no module imports another module's private name."""
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
    the registry (launch.ranks.launchers.LAUNCHERS traits, launch.ranks.runtimes.RUNTIMES) instead."""
    from launch.ranks.launchers import LAUNCHERS
    from launch.ranks.runtimes import RUNTIMES

    names = set(LAUNCHERS) | set(RUNTIMES)
    owners = {REPO / "launch" / "ranks" / "launchers.py", REPO / "launch" / "ranks" / "runtimes.py"}

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


ROOMS = ("bench", "launch", "containers")


def module_names() -> dict[str, Path]:
    names = {}
    for room in ROOMS:
        for path in (REPO / room).rglob("*.py"):
            name = path.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
            names[name.removesuffix(".__init__")] = path
    return names


def runtime_imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], list[tuple[str, str]]]:
    """(the project modules `path` imports when it runs, at the top or inside a function;
    the (module, name) pairs of private names it imports from another module). Imports under
    `if TYPE_CHECKING:` do not run and are left out."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                   for n in ast.walk(node)}
    found, private = set(), []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in modules:
                    found.add(submodule)
                elif node.module in modules:
                    found.add(node.module)
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append((node.module, alias.name))
    return found, private


def test_no_import_cycles_and_no_private_names_across_modules():
    """containers.build <-> cudabase (through a private helper) and launchers -> results.transport
    -> emulate.links -> launchers were cycles no test caught (issue 33)."""
    modules = module_names()
    graph, privates = {}, []
    for name, path in modules.items():
        imports, private = runtime_imports(path, modules)
        graph[name] = imports - {name}
        privates += [f"{name} imports {module}.{item}" for module, item in private]
    assert privates == []

    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"
    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


# launch/'s rooms from the bottom up (launch/__init__.py): "launch" is the shared basics at its top
# level. results/ and disturbance/ sit beside the rooms (a run writes through them, the report
# reads sweeps and archives), so only their cycles are checked, above.
LAUNCH_ROOMS = ("launch", "launch.fleet", "launch.ranks", "launch.site", "launch.runs", "launch.provenance",
                "launch.cli")
BESIDE_THE_ROOMS = ("launch.results", "launch.disturbance")


def launch_room(name: str) -> str | None:
    """The room of a module of launch/ ("launch.site.preflight.rdma" -> "launch.site")."""
    parts = name.split(".")
    if parts[0] != "launch" or len(parts) == 1:
        return None
    package = ".".join(parts[:2])
    if package in LAUNCH_ROOMS or package in BESIDE_THE_ROOMS:
        return package
    return "launch" if len(parts) == 2 and not (REPO / "launch" / parts[1]).is_dir() else None


def test_every_launch_module_has_a_room_and_imports_no_room_above_its_own():
    modules = {name: path for name, path in module_names().items() if name.split(".")[0] == "launch"}
    homeless = sorted(name for name in modules if name != "launch" and launch_room(name) is None)
    assert homeless == []
    upward = []
    for name, path in sorted(modules.items()):
        room = launch_room(name)
        if room not in LAUNCH_ROOMS:
            continue
        for target in sorted(runtime_imports(path, modules)[0]):
            other = launch_room(target)
            if other in LAUNCH_ROOMS and LAUNCH_ROOMS.index(other) > LAUNCH_ROOMS.index(room):
                upward.append(f"{name} ({room}) imports {target} ({other})")
    assert upward == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The check above can fail: two modules importing each other are found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    from a import _x\n")
    modules = {"a": a, "b": b}
    assert runtime_imports(a, modules)[0] == {"b"}
    assert runtime_imports(b, modules) == ({"a"}, [("a", "_x")])


def test_fabric_names_are_spelled_only_by_their_profiles():
    """A fabric is one plug-in (containers/fabrics/NAME.py): no other module compares a fabric's
    name or keeps a table keyed by fabric names; they read the profile's data instead (device
    nodes, verbs, sockets, detection, control). Defaults ("ethernet") are not comparisons."""
    from containers.fabrics import FABRICS

    names = set(FABRICS)

    def constants(node) -> set[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}

    offenders = []
    for room in ("launch", "containers"):
        for path in sorted((REPO / room).rglob("*.py")):
            if (REPO / "containers" / "fabrics") in path.parents:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare) and any(constants(s) & names for s in [node.left, *node.comparators]):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: compares a fabric name")
                elif isinstance(node, ast.Dict) and len(names & {k.value for k in node.keys
                                                                   if isinstance(k, ast.Constant)}) >= 2:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: a table keyed by fabric names")
    assert offenders == []


def test_every_benchmark_kind_is_whole():
    """A kind (launch.kinds) has a bench program per framework that exists, an assembler for its
    rank records, and a metric its results carry; nothing else names the kinds' set."""
    import importlib.util

    from bench import catalog
    from launch.kinds import KINDS
    from launch.results.assemble import ASSEMBLERS
    from launch.ranks.runspec import RunSpec

    assert set(ASSEMBLERS) == set(KINDS)
    fields = {f.name for f in __import__("dataclasses").fields(RunSpec)}
    for kind in KINDS.values():
        assert set(kind.programs) == set(catalog.ENGINES), kind.name  # every framework
        assert all(importlib.util.find_spec(module) for module in kind.programs.values()), kind.name
        assert set(kind.not_read) <= fields, kind.name
