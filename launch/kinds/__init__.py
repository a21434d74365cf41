"""The benchmark kinds: plug-in modules (launch.kinds.NAME defines `KIND`, a launch.kinds.kind.Kind
named after its module, or `KINDS`, several kinds of one parametrised class), registered by their
line in `_MODULES`. Every module that treats kinds differently asks this registry for the kind and
calls what the kind declares (its figures included: launch.kinds.kind); none compares a kind's
name (tests/test_architecture.py).

Adding a kind: its bench program (bench/<kind>.py), its module here, its name in `_MODULES`, and
the reference regenerated (`make docs`). Adding a collective: its exchange code in
bench/collectives.py and its line in launch/kinds/collectives.py. A kind that leaves out what
sweeps, verdicts, reports or plausibility need is refused here, when it is registered (`check`).

Low in launch/ (launch/__init__.py): launch.ranks (RunSpec, launchers), launch.results and the
rooms above read it; it imports only the shared basics (a kind reads a run's spec through
launch.kinds.kind.Spec, a Protocol RunSpec satisfies). A kind module imports nothing that imports
this registry.
"""

from __future__ import annotations

import importlib
from typing import Mapping, Optional

from launch.kinds.kind import Kind
from launch.schema import ResultSchema

_MODULES = ("train", "collectives", "halo")
DEFAULT = "train"  # RunSpec's default benchmark


class KindRefused(TypeError):
    """A kind module that does not declare what the rest of the bundle needs."""


def check(found: object, module: str, named_after_module: bool = True) -> Kind:
    """The module's kind, whole: every part declared, its metric findable in its typed result,
    a program for every framework of the catalog; named after its module where it is the module's
    one `KIND`."""
    from bench import catalog

    if not isinstance(found, Kind):
        raise KindRefused(f"launch.kinds.{module}: KIND is not a launch.kinds.kind.Kind")
    missing = [
        name
        for name in ("name", "summary", "programs", "metric", "fields", "plausibility_rule", "workload")
        if not getattr(found, name, None)
    ] + (["not_read"] if getattr(found, "not_read", None) is None else [])
    if missing:
        raise KindRefused(f"launch.kinds.{module}: the kind declares no {', '.join(missing)}")
    if named_after_module and found.name != module:
        raise KindRefused(f"launch.kinds.{module}: the kind is named {found.name!r}, not after its module")
    if not (isinstance(found.fields, type) and issubclass(found.fields, ResultSchema)):
        raise KindRefused(f"launch.kinds.{module}: fields is not a model of the result schema")
    declared = set(found.fields.model_fields)
    unfound = [path for path in found.metric.paths() if path.split(".")[0] not in declared]
    if unfound:
        raise KindRefused(
            f"launch.kinds.{module}: its metric reads {', '.join(unfound)}, which its result model does not declare"
        )
    if set(found.programs) != set(catalog.ENGINES):
        raise KindRefused(
            f"launch.kinds.{module}: programs for {sorted(found.programs)}, "
            f"the frameworks are {sorted(catalog.ENGINES)}"
        )
    return found


def registered(module: str) -> tuple[Kind, ...]:
    """The kinds a module of _MODULES declares: its `KINDS` (distinct names), else its one `KIND`."""
    found = importlib.import_module(f"{__name__}.{module}")
    if not hasattr(found, "KINDS"):
        return (check(getattr(found, "KIND", None), module),)
    kinds = tuple(check(k, module, named_after_module=False) for k in found.KINDS)
    names = [k.name for k in kinds]
    if len(set(names)) != len(names):
        raise KindRefused(f"launch.kinds.{module}: two kinds share a name ({', '.join(names)})")
    return kinds


KINDS: Mapping[str, Kind] = {k.name: k for m in _MODULES for k in registered(m)}
BENCHMARKS = tuple(KINDS)


def kind(name: Optional[str]) -> Kind:
    """The kind named (a RunSpec's benchmark is validated before anything asks); no name: the default."""
    return KINDS[name or DEFAULT]


def trains(name: Optional[str]) -> bool:
    return name is not None and name in KINDS and KINDS[name].trains


def kind_of(result: Mapping) -> Optional[Kind]:
    """The kind of a result: its `benchmark`, or for a result from before that field, the kind whose
    identifying field it holds; None where neither says."""
    name = result.get("benchmark")
    if isinstance(name, str) and name in KINDS:
        return KINDS[name]
    if name is None:
        for found in KINDS.values():
            if found.identified_by and result.get(found.identified_by) is not None:
                return found
    return None


def field_help(field: str) -> str:
    """A RunSpec field's help: each kind's words for it ('allreduce: mpi | torch | horovod'), kinds
    with the same words together."""
    said: dict[str, list[str]] = {}
    for found in KINDS.values():
        if field in found.options:
            said.setdefault(found.options[field], []).append(found.name)
    return "; ".join(f"{', '.join(names)}: {words}" for words, names in said.items())


def help_text() -> str:
    """`--benchmark`'s help: every kind with its summary."""
    return " | ".join(f"{k.name} ({k.summary})" for k in KINDS.values())
