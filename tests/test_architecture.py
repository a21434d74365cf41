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
    offenders = {
        str(p.relative_to(REPO)): sorted(m for m in imported_modules(p) if m.split(".")[0] == "launch")
        for p in (REPO / "bench").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_containers_imports_nothing_from_launch():
    """launch/ builds on containers/ (recipes, profiles, builds); never the other way round."""
    offenders = {
        str(p.relative_to(REPO)): sorted(m for m in imported_modules(p) if m.split(".")[0] == "launch")
        for p in (REPO / "containers").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


HTTP_CLIENTS = ("urllib.request", "http.client", "requests", "urllib3", "httpx", "aiohttp")
HTTP_CLIENT_MODULE = "containers/registry_http.py"  # its rules: credentials per host, deadlines, caps


def http_client_offenders(root: Path = REPO) -> dict[str, list[str]]:
    """Modules of the rooms, benchmarks and scripts that import an HTTP client, but the registry client's."""
    found = {}
    for folder in (*ROOMS, "benchmarks", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            used = sorted(m for m in imported_modules(path) if m in HTTP_CLIENTS or m.startswith("urllib3."))
            if used and path.relative_to(root).as_posix() != HTTP_CLIENT_MODULE:
                found[path.relative_to(root).as_posix()] = used
    return found


def test_only_the_registry_client_opens_http_connections():
    """Every request to another party keeps containers/registry_http.py's rules (issue 64)."""
    assert http_client_offenders() == {}


def test_the_http_client_check_sees_an_import(tmp_path):
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "leak.py").write_text("import urllib.request\n")
    assert http_client_offenders(tmp_path) == {"launch/leak.py": ["urllib.request"]}


def test_launch_never_loads_a_framework():
    modules = sorted(
        p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
        for p in (REPO / "launch").rglob("*.py")
        if p.name != "__init__.py"
    )
    code = (
        f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow', 'keras')))"
    )
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
                if any(subject(s) in ("launcher", "runtime") for s in sides) and any(
                    constants(s) & names for s in sides
                ):
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


def project_imports(
    path: Path, modules: dict[str, Path], *, type_only: bool = False
) -> tuple[set[str], list[tuple[str, str]]]:
    """(the project modules `path` imports, at the top or inside a function; the (module, name)
    pairs of private names it imports from another module). Imports under `if TYPE_CHECKING:`
    do not run: they count only with `type_only`."""
    tree = ast.parse(path.read_text())
    typing_only = (
        set()
        if type_only
        else {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for n in ast.walk(node)
        }
    )
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


def runtime_imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], list[tuple[str, str]]]:
    """project_imports without the imports under `if TYPE_CHECKING:` (they do not run)."""
    return project_imports(path, modules)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module -> the project modules it imports, type-only imports included: an import
    circle through `if TYPE_CHECKING:` still ties the modules together (one cannot be read,
    moved or tested without the other)."""
    return {name: project_imports(path, modules, type_only=True)[0] - {name} for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk meets, as "a -> b -> a"."""
    found, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                found.append(" -> ".join(trail[trail.index(target) :] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def test_no_import_circle_and_no_private_names_across_modules():
    """containers.build <-> cudabase (through a private helper) and launchers -> results.transport
    -> emulate.links -> launchers were circles no test caught (issue 33); kinds <-> ranks.runspec
    <-> launchers <-> fleet.emulate one that went through `if TYPE_CHECKING:` (issue 52)."""
    modules = module_names()
    privates = [
        f"{name} imports {module}.{item}"
        for name, path in modules.items()
        for module, item in runtime_imports(path, modules)[1]
    ]
    assert privates == []
    assert circles(import_graph(modules)) == []


# launch/'s rooms from the bottom up (launch/__init__.py): "launch" is the shared basics at its top
# level. A module imports from its own room and those before it, never from one after it.
LAUNCH_ROOMS = (
    "launch",
    "launch.kinds",
    "launch.results",
    "launch.disturbance",
    "launch.fleet",
    "launch.ranks",
    "launch.site",
    "launch.plan",
    "launch.provenance",
    "launch.sharing",
    "launch.predict",
    "launch.analysis",
    "launch.runs",
    "launch.cli",
)


def launch_room(name: str, root: Path = REPO) -> str | None:
    """The room of a module of launch/ ("launch.site.preflight.rdma" -> "launch.site")."""
    parts = name.split(".")
    if parts[0] != "launch" or len(parts) == 1:
        return None
    package = ".".join(parts[:2])
    if package in LAUNCH_ROOMS:
        return package
    return "launch" if len(parts) == 2 and not (root / "launch" / parts[1]).is_dir() else None


def room_graph(graph: dict[str, set[str]], room_of) -> dict[str, set[str]]:
    """The rooms' graph: room -> the other rooms its modules import (type-only imports included)."""
    rooms: dict[str, set[str]] = {}
    for name, targets in graph.items():
        room = room_of(name)
        if room is None:
            continue
        rooms.setdefault(room, set())
        rooms[room] |= {other for other in map(room_of, targets) if other is not None and other != room}
    return rooms


def test_every_launch_module_has_a_room_and_imports_no_room_above_its_own():
    modules = {name: path for name, path in module_names().items() if name.split(".")[0] == "launch"}
    homeless = sorted(name for name in modules if name != "launch" and launch_room(name) is None)
    assert homeless == []
    upward = []
    for name, targets in sorted(import_graph(modules).items()):
        room = launch_room(name)
        if room not in LAUNCH_ROOMS:
            continue
        for target in sorted(targets):
            other = launch_room(target)
            if other in LAUNCH_ROOMS and LAUNCH_ROOMS.index(other) > LAUNCH_ROOMS.index(room):
                upward.append(f"{name} ({room}) imports {target} ({other})")
    assert upward == []


def test_no_package_cycle_among_launch_rooms():
    """No two of launch/'s packages import each other, however indirectly and even through
    `if TYPE_CHECKING:` (kinds <-> ranks, kinds <-> results, provenance <-> results, results <->
    runs and results <-> site were such cycles: issue 52). Stricter than the layer order above in
    one way: it needs no order to be written down."""
    modules = {name: path for name, path in module_names().items() if name.split(".")[0] == "launch"}
    assert circles(room_graph(import_graph(modules), launch_room)) == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    """The check above can fail: two modules importing each other are found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import b\n")
    b.write_text("def f():\n    from a import _x\n")
    modules = {"a": a, "b": b}
    assert runtime_imports(a, modules)[0] == {"b"}
    assert runtime_imports(b, modules) == ({"a"}, [("a", "_x")])
    assert circles(import_graph(modules)) == ["a -> b -> a"]


def test_the_circle_check_sees_a_circle_through_a_type_only_import(tmp_path):
    """A circle that closes only under `if TYPE_CHECKING:` is a circle too; left out, it is not seen."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("import b\n")
    b.write_text("from c import f\n")
    c.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import A\ndef f(x: 'A'): ...\n")
    modules = {"a": a, "b": b, "c": c}
    assert circles({name: runtime_imports(path, modules)[0] for name, path in modules.items()}) == []
    assert circles(import_graph(modules)) == ["a -> b -> c -> a"]


def test_the_package_cycle_check_sees_two_packages_importing_each_other(tmp_path):
    """Two rooms of a planted launch/ whose modules import each other's room, neither module
    importing the other one back (no module circle): the rooms' cycle is found."""
    for room, text in {"low": "from launch.high import y\n", "high": "import launch.other\n", "other": ""}.items():
        (tmp_path / "launch" / room).mkdir(parents=True)
        (tmp_path / "launch" / room / "__init__.py").write_text("")
        (tmp_path / "launch" / room / "x.py").write_text(text)
    (tmp_path / "launch" / "high" / "y.py").write_text("")
    (tmp_path / "launch" / "other" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import launch.low.x\n"
    )
    modules = {
        p.relative_to(tmp_path).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__"): p
        for p in (tmp_path / "launch").rglob("*.py")
    }
    graph = import_graph(modules)
    assert circles(graph) == []

    def room_of(name: str) -> str | None:
        parts = name.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else None

    assert circles(room_graph(graph, room_of)) == ["launch.high -> launch.other -> launch.low -> launch.high"]


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
                elif (
                    isinstance(node, ast.Dict)
                    and len(names & {k.value for k in node.keys if isinstance(k, ast.Constant)}) >= 2
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: a table keyed by fabric names")
    assert offenders == []


def test_every_benchmark_kind_is_whole():
    """A kind (launch.kinds) has a bench program per framework that exists, RunSpec fields it does
    not read that exist, and a figure of merit its typed result declares (checked at registration)."""
    import importlib.util

    from launch.kinds import KINDS
    from launch.ranks.runspec import RunSpec

    fields = {f.name for f in __import__("dataclasses").fields(RunSpec)}
    for kind in KINDS.values():
        assert all(importlib.util.find_spec(module) for module in kind.programs.values()), kind.name
        assert set(kind.not_read) <= fields, kind.name


def test_a_kind_that_declares_nothing_for_sweeps_and_verdicts_is_refused_at_registration():
    """Not dropped at report time: a kind without a figure of merit, or whose metric reads a field
    its result model does not declare, or without a plausibility rule, never registers."""
    import pytest

    from launch.kinds import KindRefused, check
    from launch.kinds.halo import Halo
    from launch.kinds.kind import Kind, Metric

    class NoMetric(Halo):
        metric = None  # type: ignore[assignment]

    class ElsewhereMetric(Halo):
        metric = Metric("x_gbit_s", "x", "Gbit/s", True, value_at=("nowhere.x_gbit_s",))

    # a kind module that leaves its plausibility rule out
    NoRule = type(
        "NoRule", (Kind,), {k: v for k, v in vars(Halo).items() if not k.startswith("_") and k != "plausibility"}
    )

    with pytest.raises(KindRefused, match="declares no metric"):
        check(NoMetric(), "halo")
    with pytest.raises(KindRefused, match="nowhere.x_gbit_s"):
        check(ElsewhereMetric(), "halo")
    with pytest.raises(TypeError, match="plausibility"):
        check(NoRule(), "halo")
    assert check(Halo(), "halo").name == "halo"


def _kind_names() -> set[str]:
    from launch.kinds import KINDS

    return set(KINDS)


def kind_name_offenders(paths, root: Path = REPO) -> list[str]:
    names = _kind_names()

    def constants(node) -> set[str]:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}

    offenders = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(constants(s) & names for s in [node.left, *node.comparators]):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}: compares a kind name")
            elif (
                isinstance(node, ast.Dict)
                and len(names & {k.value for k in node.keys if isinstance(k, ast.Constant)}) >= 2
            ):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}: a table keyed by kind names")
    return offenders


def test_kind_names_are_compared_only_by_their_kinds():
    """A benchmark kind is one plug-in (launch/kinds/NAME.py): no other module of launch/ or
    containers/ compares a kind's name or keeps a table keyed by kind names; it asks the registry for
    the kind and calls what the kind declares (its metric, table, plausibility rule, arguments, ...).
    bench/ (each program writes its own records) and the scripts of benchmarks/ (each runs the kinds
    it measures, as a user would) are outside the bundle's plumbing."""
    paths = [
        p
        for room in ("launch", "containers")
        for p in sorted((REPO / room).rglob("*.py"))
        if (REPO / "launch" / "kinds") not in p.parents
    ]
    assert kind_name_offenders(paths) == []


def test_the_kind_name_check_sees_a_comparison(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('def f(result):\n    return result.get("benchmark") == "halo"\nT = {"train": 1, "allreduce": 2}\n')
    assert sorted(kind_name_offenders([bad], tmp_path)) == [
        "bad.py:2: compares a kind name",
        "bad.py:3: a table keyed by kind names",
    ]


def test_kind_modules_import_nothing_that_imports_the_registry():
    """The registry loads its kind modules by name (importlib), so the cycle check above does not
    see registry -> kind: a kind module must not reach the registry back through what it imports."""
    modules = module_names()
    graph = {name: runtime_imports(path, modules)[0] - {name} for name, path in modules.items()}

    def reaches(start: str, target: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == target:
                return True
            if node not in seen:
                seen.add(node)
                todo += sorted(graph.get(node, ()))
        return False

    kinds = [name for name in modules if name.startswith("launch.kinds.")]
    assert len(kinds) >= 5  # kind, sizes and the kinds themselves
    assert [k for k in kinds if any(reaches(t, "launch.kinds") for t in graph[k])] == []


# Modules outside launch/results/ that still read a result's keys raw, and why (issue 43, item 2).
RAW_RESULT_READERS = {
    # an archive's results travel as data across the trust boundary: copied into runs.json and the
    # manifest as they are, their spec checked by RunSpec.from_dict before a replay uses it
    "launch/provenance/archive.py",
    "launch/runs/replay.py",
}


def result_declared_fields() -> set[str]:
    from launch.kinds import KINDS
    from launch.schema import ResultSchema

    found = set(ResultSchema.model_fields)
    for kind in KINDS.values():
        found |= set(kind.fields.model_fields)
    # what every run's result holds beside the declared fields (launch.runs.run, launch.results.assemble)
    return found | {
        "plausibility",
        "argv",
        "env",
        "exit_code",
        "stall",
        "stragglers",
        "placement",
        "launch",
        "preflight",
        "slurm",
        "replay_of",
        "interruption",
        "log_tail",
        "migrated_from",
    }


# the names results go by, as a variable or an attribute (item.original), and as an attribute only
# (a sweep point's first result, point.first; a rank record elsewhere may be called first)
RESULT_NAMES = {"result", "original", "train", "baseline", "trained", "measured", "ra", "rb", "two"}
RESULT_ATTRIBUTES = RESULT_NAMES | {"first"}
# launch.results.result's loaders: a name bound to what they return holds a result
RESULT_LOADERS = {"read", "parse", "read_result", "one_run"}


def result_bases(tree: ast.AST) -> set[str]:
    """The names a module's results go by: RESULT_NAMES, a name bound to a loader's return
    (`last = read(path)`, `runs = [one_run(...)]`), a name indexed out of one (`last = runs[-1]`)
    and the loop name over something named *result* or bound to results."""
    names = set(RESULT_NAMES)
    while True:  # until no name is added: a name bound from a name bound from a loader, ...
        before = len(names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = node.value
                called = {
                    n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                    for n in ast.walk(value)
                    if isinstance(n, ast.Call)
                }
                indexed = value.value if isinstance(value, ast.Subscript) else None
                if called & RESULT_LOADERS or result_name(indexed, names):
                    names.add(node.targets[0].id)
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                over = {n.id for n in ast.walk(node.iter) if isinstance(n, ast.Name)}
                if any("result" in name or name in names for name in over):
                    names.add(node.target.id)
        if len(names) == before:
            return names


def result_name(expr: ast.expr | None, names: set[str]) -> str | None:
    """The name `expr` goes by where it is a result: a name in `names`, or an attribute results go
    by (RESULT_ATTRIBUTES); else None."""
    if isinstance(expr, ast.Name) and expr.id in names:
        return expr.id
    if isinstance(expr, ast.Attribute) and expr.attr in RESULT_ATTRIBUTES:
        return expr.attr
    return None


def raw_result_reads(path: Path, fields: set[str], root: Path = REPO) -> list[str]:
    """`result["x"]` and `result.get("x")` of a result field, where `result` is a name or an
    attribute results go by (result_bases)."""
    tree = ast.parse(path.read_text())
    names = result_bases(tree)
    found = []
    for node in ast.walk(tree):
        key, base = None, None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key, base = node.slice.value, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key, base = node.args[0].value, node.func.value
        said = result_name(base, names)
        if isinstance(key, str) and key in fields and said:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {said}[{key!r}]")
    return found


# launch/results/ modules that read a result's dict: its owner (result: the typed model and the
# accessors every reader takes; schema) and the builder with the stages that contribute to a result
# while it is built (assemble, transport, plausibility read the dict they are completing)
RESULT_OWNERS = {
    "launch/results/result.py",
    "launch/schema.py",
    "launch/results/assemble.py",
    "launch/results/transport.py",
    "launch/results/plausibility.py",
}


def test_results_are_read_typed():
    """Readers take the schema's typed model (launch.results.result.typed: the shared fields and the
    kind's own) or Result's accessors, so a field's name and shape live in one place: every module of
    launch/ (the readers of launch/results/ included) and benchmarks/ but the owners above, the kinds
    (each reads its own model) and the allow-listed modules above. A value typed Result is checked by
    mypy itself (a raw read of one is an error: test_mypy_refuses_a_raw_read_of_a_result); this check
    by name still covers a mapping typed `dict` (a result while it is built, one made in memory)."""
    fields = result_declared_fields()
    offenders = []
    for path in sorted([*(REPO / "launch").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]):
        name = str(path.relative_to(REPO))
        if REPO / "launch" / "kinds" in path.parents or name in RAW_RESULT_READERS | RESULT_OWNERS:
            continue
        offenders += raw_result_reads(path, fields)
    assert offenders == []


def test_the_raw_read_check_sees_a_raw_read(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(result, results):\n    a = result["status"]\n'
        '    return [r.get("world_size") for r in results] + [row["bytes"] for row in a]\n'
        "def g(item, point, path):\n"
        "    runs = [read(path)]\n    last = runs[-1]\n"
        '    return item.original["run_id"], point.first.get("spec"), last["status"], [r["run_id"] for r in runs]\n'
    )
    assert sorted(raw_result_reads(bad, result_declared_fields(), tmp_path)) == [
        "bad.py:2: result['status']",
        "bad.py:3: r['world_size']",
        "bad.py:7: first['spec']",
        "bad.py:7: last['status']",
        "bad.py:7: original['run_id']",
        "bad.py:7: r['run_id']",
    ]


def result_writes(path: Path, root: Path = REPO) -> list[str]:
    """Assignments into a result (`result["x"] = ...`, `+=`) and `result.update/setdefault/pop(...)`,
    where `result` is a name results go by (result_bases)."""
    tree = ast.parse(path.read_text())
    names = result_bases(tree)
    found = []
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Subscript) and (said := result_name(target.value, names)):
                found.append(f"{path.relative_to(root)}:{node.lineno}: assigns into {said}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("update", "setdefault", "pop")
            and (said := result_name(node.func.value, names))
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {said}.{node.func.attr}(...)")
    return found


def test_only_the_builder_writes_into_a_result():
    """A result is built in one place (launch.results.assemble.build, from what each stage
    contributes): no other module of launch/ or benchmarks/ assigns a result's key or updates it."""
    builder = REPO / "launch" / "results" / "assemble.py"
    paths = sorted([*(REPO / "launch").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")])
    offenders = [found for path in paths if path != builder for found in result_writes(path)]
    assert offenders == []


def test_the_write_check_sees_a_write(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(result, path):\n    result["status"] = "ok"\n    result.update(x=1)\n'
        '    last = read(path)\n    last["rank_pids"] = []\n    row = {}\n    row["x"] = 1\n'
        '    path.original["status"] = "ok"\n'
    )
    assert sorted(result_writes(bad, tmp_path)) == [
        "bad.py:2: assigns into result",
        "bad.py:3: result.update(...)",
        "bad.py:5: assigns into last",
        "bad.py:8: assigns into original",
    ]


# ---------------------------------------------------------------- shapes: only the parser makes one


def shape_constructions(path: Path, root: Path = REPO) -> list[str]:
    """Where a module other than launch/shapes.py calls a shape's constructor (SlurmName(...)) or
    casts to one (cast(SlurmName, ...), cast("SlurmName", ...)): either would let a raw str
    through to a sink with mypy's blessing."""
    from launch.shapes import CONSTRUCTED_HERE

    def named(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Attribute):
            return expr.attr
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value.rsplit(".", 1)[-1]
        return None

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        called = named(node.func)
        if called in CONSTRUCTED_HERE:
            found.append(f"{path.relative_to(root)}:{node.lineno}: constructs {called}")
        elif called == "cast" and node.args and named(node.args[0]) in CONSTRUCTED_HERE:
            found.append(f"{path.relative_to(root)}:{node.lineno}: casts to {named(node.args[0])}")
    return found


def test_only_the_shapes_module_constructs_a_shape():
    shapes_module = REPO / "launch" / "shapes.py"
    offenders = [
        line
        for room in (*ROOMS, "benchmarks")
        for path in sorted((REPO / room).rglob("*.py"))
        if path != shapes_module
        for line in shape_constructions(path)
    ]
    assert offenders == []


def test_the_shape_check_sees_a_construction_and_a_cast(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from typing import cast\nfrom launch import shapes\n"
        "a = shapes.SlurmName('x')\nb = cast('SlurmName', 'y')\nc = cast(shapes.SlurmTime, 'z')\n"
        "d = shapes.slurm_name('f', 'ok')\n"
    )
    assert shape_constructions(bad, tmp_path) == [
        "bad.py:3: constructs SlurmName",
        "bad.py:4: casts to SlurmName",
        "bad.py:5: casts to SlurmTime",
    ]


def mypy_errors(snippet: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """mypy with the project's configuration on a snippet that must fail: the run and its error lines."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), str(snippet)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    return proc, [line for line in proc.stdout.splitlines() if snippet.name in line and "error:" in line]


def test_mypy_refuses_a_raw_str_at_every_slurm_sink(tmp_path):
    """The sinks take shapes, so a raw str reaching one is a type error: shown on a snippet that
    hands job_script raw strings (mypy with the project's configuration and cache)."""
    snippet = tmp_path / "raw_to_sink.py"
    snippet.write_text(
        "from launch import shapes\nfrom launch.fleet import slurm\n"
        "slurm.job_script(name='n', nodes=1, tasks_per_node=1, output=shapes.slurm_log('o', '/o'),\n"
        "                 announce='a', body=[], partition='gpu', account='acct', time='10')\n"
        "slurm.Request(partition='gpu')\n"
    )
    proc, errors = mypy_errors(snippet)
    assert [e.split(": error: ")[1].split(";")[0] for e in errors] == [
        'Argument "name" to "job_script" has incompatible type "str"',
        'Argument "partition" to "job_script" has incompatible type "str"',
        'Argument "account" to "job_script" has incompatible type "str"',
        'Argument "time" to "job_script" has incompatible type "str"',
        'Argument "partition" to "Request" has incompatible type "str"',
    ], proc.stdout[-2000:]


def test_mypy_refuses_a_raw_read_of_a_result(tmp_path):
    """A Result's readers take its typed model: a raw read of one (`result["x"]`, `result.get("x")`)
    is a type error (launch.results.result.Result; pyproject.toml: the deprecated code is an error),
    and its spec is typed (launch.schema.Spec), so a raw read of that is one too."""
    snippet = tmp_path / "raw_read.py"
    snippet.write_text(
        "from launch.results.result import read\n"
        "result = read('result.json')\n"
        "a = result['status']\n"
        "b = result.get('spec')\n"
        "c = result.spec.get('fabric')\n"
        "d = (result.spec.fabric, result.status, result.fields)\n"
    )
    proc, errors = mypy_errors(snippet)
    assert [e.split(":")[1] + " " + e.rsplit("[", 1)[1].rstrip("]") for e in errors] == [
        "3 deprecated",
        "4 deprecated",
        "5 attr-defined",
    ], proc.stdout[-2000:]


# ---------------------------------------------------------------- types: Any and `type: ignore` capped

# Per room, the most uses of typing.Any (its imports and the name in annotations, aliases and casts,
# string annotations included) and `# type: ignore` comments the room may hold: the counts when mypy
# began checking untyped bodies (issue 52), lowered as they fall (launch 71 -> 66: the typed result). Where a real type exists, use it; where Any is the honest
# type (JSON not yet parsed, a library without types), raise the cap in the same change and say why.
TYPE_ESCAPE_CAPS = {
    "launch": {"Any": 66, "type: ignore": 3},
    "bench": {"Any": 0, "type: ignore": 0},
    "benchmarks": {"Any": 4, "type: ignore": 0},
    "containers": {"Any": 4, "type: ignore": 0},
}


def type_escapes(path: Path) -> dict[str, int]:
    """How often the module at `path` names typing.Any, and its `# type: ignore` comments (comment
    tokens only: the words inside a string are not counted)."""
    import io
    import re
    import tokenize

    text = path.read_text()
    tree = ast.parse(text)
    names, modules, imports = set(), set(), 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("typing", "typing_extensions"):
            found = [alias.asname or alias.name for alias in node.names if alias.name == "Any"]
            names |= set(found)
            imports += len(found)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "typing"}

    def written(node: ast.AST) -> list[ast.expr]:
        """The annotations and cast targets `node` holds."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
            return [a.annotation for a in every if a is not None and a.annotation is not None] + (
                [node.returns] if node.returns is not None else []
            )
        if isinstance(node, ast.AnnAssign):
            return [node.annotation]
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "cast":
            return node.args[:1]
        return []

    def uses(expr: ast.AST, in_a_type: bool) -> int:
        count = 0
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in names:
                count += 1
            elif isinstance(node, ast.Attribute) and node.attr == "Any" and getattr(node.value, "id", None) in modules:
                count += 1
            elif in_a_type and isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:  # a string annotation ("dict[str, Any]"), or a Literal's value
                    count += uses(ast.parse(node.value, mode="eval"), True)
                except SyntaxError:
                    pass
        return count

    in_names = uses(tree, False)  # the name wherever it appears, string annotations aside
    in_strings = sum(
        uses(constant, True)
        for node in ast.walk(tree)
        for expr in written(node)
        for constant in ast.walk(expr)
        if isinstance(constant, ast.Constant)
    )
    ignores = [
        token
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT and re.search(r"#\s*type:\s*ignore\b", token.string)
    ]
    return {"Any": imports + in_names + in_strings, "type: ignore": len(ignores)}


def room_type_escapes(room: str, root: Path = REPO) -> dict[str, int]:
    total = {"Any": 0, "type: ignore": 0}
    for path in sorted((root / room).rglob("*.py")):
        if (root / "containers" / "horovod") not in path.parents:  # not checked by mypy either
            for what, count in type_escapes(path).items():
                total[what] += count
    return total


def over_the_caps(counts: dict[str, dict[str, int]], caps: dict[str, dict[str, int]]) -> list[str]:
    return [
        f"{room}: {counts[room][what]} {what} (cap {cap})"
        for room, room_caps in caps.items()
        for what, cap in room_caps.items()
        if counts[room][what] > cap
    ]


def test_any_and_type_ignore_stay_under_their_caps():
    counts = {room: room_type_escapes(room) for room in TYPE_ESCAPE_CAPS}
    assert over_the_caps(counts, TYPE_ESCAPE_CAPS) == [], counts


def test_the_type_escape_count_sees_any_and_ignores(tmp_path):
    """The cap can fail: every way of naming Any is counted, and a comment, not a string, ignores."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import typing as t\nfrom typing import Any, cast\n"
        "x: Any = 1\n"
        "def f(a: 'dict[str, Any]', b: t.Any) -> list[Any]:  # type: ignore[misc]\n"
        "    return cast('Any', a)  # type:ignore\n"
        "s = 'Any  # type: ignore'  # a string: neither Any nor an ignore\n"
    )
    counts = type_escapes(bad)
    assert counts == {"Any": 6, "type: ignore": 2}
    caps = {"bench": {"Any": 5, "type: ignore": 2}}
    assert over_the_caps({"bench": counts}, caps) == ["bench: 6 Any (cap 5)"]
