"""Experiment files: a matrix of runs in TOML, validated into typed objects and
expanded into RunSpecs.

    [experiment]
    name = "cpu-fabrics"
    repetitions = 2                 # the whole matrix, run this many times (alternating rounds)
    time_limit_s = 300              # per run: the run and all its ranks are killed after this

    [matrix]                        # every combination of these lists is one run
    framework = ["torch"]
    engine = ["ddp", "horovod"]     # each kept for the frameworks that have it
    model = ["resnet18"]            # each kept for the frameworks that know it
    fabric = ["ethernet"]
    nodes = [1, 2, 4]
    ranks_per_node = [2]
    allreduce = ["nccl", "mpi"]     # combinations an engine cannot run are dropped (ddp x mpi); MPI on GPU
                                    # buffers only in images that say their MPI is CUDA-aware (preflight)
    gpudirect = ["on", "off"]       # GPUDirect RDMA for NCCL and CUDA-aware MPI (dropped beside gloo, and without GPUs)
    benchmark = ["train", "halo"]   # fields a benchmark does not read are not crossed with it (launch.kinds)

    [run]                           # one value for every run
    image_size = 32
    launcher = "sbatch"
    image = "images/{fabric}-cuda.sif"   # {fabric}: images differ only in fabric libraries
    [run.env]                       # extra environment for every rank
    NCCL_DEBUG = "WARN"

Any RunSpec field may appear in [matrix] (a list) or in [run] (one value), but
not both; `ranks` is nodes x ranks_per_node, `extra_env` is [run.env] and the
Slurm time limit follows time_limit_s. An experiment file travels between sites as an
archive does, so [run.env] passes the archive's gate (launch.trust.check_foreign_env):
named knobs of their shape, others only as `sweep --accept-env NAME` accepts them, and
never a variable that runs, loads, reads or writes what it names; its image runs only where
this site has it or accepts it by name (`sweep --accept-image IMAGE`, launch.runs.images).
Unset fields take the site's defaults (launcher, runtime, partition, account), then RunSpec's.

Expansion adds the 1-rank baseline every scaling-efficiency figure needs (a
1-rank point of the matrix where it has one, else one node, one rank, no
fabric: nothing crosses a network) and gives every point a
stable key (hash of its spec and repetition) by which a rerun finds it.
Single-node points under the emulated launcher run with the local launcher:
one emulated host has no emulated link to cross; they get one rank's share of
this machine's cores in the largest emulated run (OMP_NUM_THREADS), as the
emulated ranks do.

Every problem is one UsageError line naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import catalog
from containers.files import sha256_bytes
from launch import shapes, trust
from launch.fleet import slurm
from launch.errors import UsageError
from launch.kinds import DEFAULT, KINDS, trains
from launch.toml_file import TomlTable, expected, read_toml
from launch.ranks.launchers import LAUNCHERS, LOCAL, MPIRUN, SLURM_LAUNCHERS, launcher_of
from launch.ranks.runspec import HOROVOD_CPU_ONLY, IN_SWITCH_ENV, LATER_FIELDS, RunSpec
from launch.site.config import Site

TOP_KEYS = ("experiment", "matrix", "run")
EXPERIMENT_KEYS = ("name", "description", "repetitions", "time_limit_s")
MAX_REPETITIONS = 1000
MAX_TIME_LIMIT_S = 7 * 24 * 3600  # a guard per run: a week
DERIVED = ("ranks", "extra_env", "time_limit")  # set from other keys, never directly
SPEC_TYPES = {name: hint for name, hint in typing.get_type_hints(RunSpec).items() if name not in DERIVED}
SPEC_TYPES["ranks_per_node"] = int


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its spec, which repetition, and the key a rerun finds it by."""

    spec: RunSpec
    repetition: int = 0
    baseline: bool = False

    @property
    def key(self) -> str:
        # time_limit is a guard, exclude_nodes where it runs (a retry leaves a failed node out): not settings
        described = {
            k: v
            for k, v in self.spec.as_dict().items()
            if k not in ("time_limit", "exclude_nodes") and not (k in LATER_FIELDS and v is None)
        }
        text = json.dumps({"spec": described, "repetition": self.repetition}, sort_keys=True)
        return sha256_bytes(text.encode())[:12]

    @property
    def label(self) -> str:
        s = self.spec
        parts = [
            *s.label_parts(),
            s.fabric or "nofabric",
            s.allreduce,
            s.gpudirect and f"gdr{s.gpudirect}",
            s.nvls and f"nvls{s.nvls}",
            s.sharp and f"sharp{s.sharp}",
            f"n{s.nodes}x{s.ranks_per_node}",
            trains(s.benchmark) and f"b{s.batch_size}",
            f"r{self.repetition}",
        ]
        return re.sub(r"[^\w.+-]", "_", "-".join(p for p in parts if p))


@dataclass(frozen=True)
class Experiment:
    path: Path
    name: str
    description: str = ""
    repetitions: int = 1
    time_limit_s: float | None = None
    matrix: dict[str, tuple] = field(default_factory=dict)  # RunSpec field -> values, in file order
    fixed: dict[str, Any] = field(default_factory=dict)  # RunSpec field -> one value
    env: dict[str, str] = field(default_factory=dict)
    accepted_env: tuple[str, ...] = ()  # names outside the allow-list this site accepted (--accept-env)
    accepted_images: tuple[str, ...] = ()  # images this site accepted by name (--accept-image)

    def where(self, key: str) -> str:
        """'[matrix].key' or '[run].key': where the file sets it."""
        return f"[matrix].{key}" if key in self.matrix else f"[run].{key}"

    def error(self, key: str, message: str) -> UsageError:
        return UsageError(f"{self.path.name}: {self.where(key)}: {message}")


# ------------------------------------------------------------------ loading


def _base_type(hint) -> type:
    if isinstance(hint, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return typing.get_origin(hint) or hint


def _typed(path: Path, where: str, name: str, value: Any) -> Any:
    kind = _base_type(SPEC_TYPES[name])
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise expected(path, where, f"{'an' if kind is int else 'a'} {kind.__name__}", value)
    return value


def _spec_table(path: Path, table: dict, prefix: str, lists: bool) -> dict:
    allowed = tuple(SPEC_TYPES) + (() if lists else ("env",))
    TomlTable(path, table, prefix).reject_unknown(allowed)
    values = {}
    for name, value in table.items():
        where = f"[{prefix}].{name}"
        if name == "env":
            continue
        if lists:
            if not isinstance(value, list):
                raise expected(path, where, "a list of values (one run per value)", value)
            if not value:
                raise UsageError(f"{path.name}: {where}: empty list: the matrix would have no runs")
            typed = tuple(_typed(path, where, name, v) for v in value)
            if len(set(typed)) != len(typed):
                raise expected(path, where, "distinct values", value)
            values[name] = typed
        else:
            values[name] = _typed(path, where, name, value)
    return values


def _env(path: Path, table: Any, accepted: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(table, dict):
        raise expected(path, "[run].env", 'a table of NAME = "value"', table)
    for name, value in table.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name) or not isinstance(value, str):
            raise expected(path, f"[run.env].{name}", "an environment variable name with a string value", value)
    trust.check_foreign_env(table, accepted, where=f"{path.name}: [run.env]: ", listed_by=None)
    return dict(table)


def experiment_from_dict(
    data: dict, path: Path, accepted_env: tuple[str, ...] = (), accepted_images: tuple[str, ...] = ()
) -> Experiment:
    TomlTable(path, data).reject_unknown(TOP_KEYS)
    for name in TOP_KEYS:
        if not isinstance(data.get(name, {}), dict):
            raise expected(path, name, f"a table [{name}]", data[name])
    head = data.get("experiment", {})
    TomlTable(path, head, "experiment").reject_unknown(EXPERIMENT_KEYS)
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}", name):
        # it names the sweep's folder and its Slurm job: a Slurm name's shape (launch.shapes)
        raise expected(path, "[experiment].name", "a name of ASCII letters, digits, '.', '+', '-', '_'", name)
    description = head.get("description", "")
    if not isinstance(description, str):
        raise expected(path, "[experiment].description", "a string", description)
    repetitions = head.get("repetitions", 1)
    if not isinstance(repetitions, int) or isinstance(repetitions, bool) or not 1 <= repetitions <= MAX_REPETITIONS:
        raise expected(path, "[experiment].repetitions", f"an integer 1..{MAX_REPETITIONS}", repetitions)
    limit = head.get("time_limit_s")
    if limit is not None and (
        not isinstance(limit, (int, float)) or isinstance(limit, bool) or not 0 < limit <= MAX_TIME_LIMIT_S
    ):
        raise expected(path, "[experiment].time_limit_s", f"seconds, more than 0 and at most {MAX_TIME_LIMIT_S}", limit)
    if not data.get("matrix"):
        raise UsageError(f"{path.name}: [matrix]: missing or empty: the experiment would have no runs")
    matrix = _spec_table(path, data["matrix"], "matrix", lists=True)
    run_table = data.get("run", {})
    fixed = _spec_table(path, run_table, "run", lists=False)
    for name in sorted(set(matrix) & set(fixed)):
        raise UsageError(f"{path.name}: [run].{name}: contradicts [matrix].{name}; set it in one table only")
    return Experiment(
        path=path,
        name=name,
        description=description,
        repetitions=repetitions,
        time_limit_s=float(limit) if limit is not None else None,
        matrix=matrix,
        fixed=fixed,
        env=_env(path, run_table.get("env", {}), accepted_env),
        accepted_env=accepted_env,
        accepted_images=tuple(shapes.image("--accept-image", image) for image in accepted_images),
    )


def load_experiment(
    path: Path | str, accepted_env: tuple[str, ...] = (), accepted_images: tuple[str, ...] = ()
) -> Experiment:
    """Read and validate an experiment file; every problem is one UsageError line.
    `accepted_env`: variables outside the allow-list this site accepts in [run.env] (--accept-env);
    `accepted_images`: images this site accepts by name (--accept-image, launch.runs.images)."""
    path = Path(path)
    data = read_toml(path, "experiment")
    return experiment_from_dict(data, path, accepted_env, accepted_images)


# ---------------------------------------------------------------- expansion

# Combinations the matrix creates but no engine can run: (keys involved, why, test).
NOT_APPLICABLE = (
    (
        ("framework", "engine"),
        "engine of another framework",
        lambda f: f["engine"] not in catalog.ENGINES[f["framework"]],
    ),
    (("framework", "model"), "model of another framework", lambda f: f["model"] not in catalog.MODELS[f["framework"]]),
    (
        ("framework", "precision"),
        "precision of another framework",
        lambda f: f["precision"] not in catalog.PRECISIONS[f["framework"]],
    ),
    (("engine", "allreduce"), "DDP has no MPI allreduce", lambda f: f["engine"] == "ddp" and f["allreduce"] == "mpi"),
    (
        ("allreduce", "gpudirect"),
        "GPUDirect 'on' needs NCCL or CUDA-aware MPI, not gloo",
        lambda f: f["gpudirect"] == "on" and f["allreduce"] == "gloo",
    ),
    (
        ("gpudirect", "gpus_per_node"),
        "GPUDirect 'on' needs GPUs (gpus_per_node > 0)",
        lambda f: f["gpudirect"] == "on" and not f["gpus_per_node"],
    ),
    (
        ("engine", "allreduce", "gpus_per_node"),
        "Horovod on GPUs has no gloo GPU operations: NCCL would move the gradients (launch.ranks.runspec)",
        lambda f: (
            f.get("engine") == "horovod"
            and f.get("allreduce") in HOROVOD_CPU_ONLY
            and bool(f.get("gpus_per_node"))
            and trains(f.get("benchmark", DEFAULT))
        ),
    ),
    *(
        (
            (name, "gpus_per_node", "allreduce"),
            f"{name} 'on' is NCCL's: it needs GPUs and NCCL",
            lambda f, name=name: (
                f.get(name) == "on" and (not f.get("gpus_per_node") or f.get("allreduce") in ("mpi", "gloo"))
            ),
        )
        for name in IN_SWITCH_ENV
    ),
)


def read_fields(experiment: Experiment, fields: dict) -> dict:
    """The fields a combination's benchmark reads, where the matrix varies the benchmark."""
    if "benchmark" not in experiment.matrix:
        return fields
    # a kind's unread fields (launch.kinds): the halo proxy is not run once per CNN, nor per allreduce library
    name = fields.get("benchmark", DEFAULT)
    ignored = KINDS[name].not_read if name in KINDS else ()
    return {name: value for name, value in fields.items() if name not in ignored}


def _dropped(experiment: Experiment, fields: dict) -> str | None:
    """Why no engine can run this combination the matrix made (None: it can).

    A rule applies only where one of its keys varies in [matrix]: the same
    contradiction written into [run] alone is an error (see _validated)."""
    for keys, why, broken in NOT_APPLICABLE:
        if any(k in experiment.matrix for k in keys) and fields["framework"] in catalog.ENGINES and broken(fields):
            return why
    return None


def _defaults(experiment: Experiment, site: Site) -> dict:
    defaults = {
        "launcher": site.launcher,
        "runtime": site.runtime,
        "partition": site.scheduler.partition,
        "account": site.scheduler.account,
    }
    return {name: value for name, value in defaults.items() if value is not None}


def _spec(experiment: Experiment, fields: dict, site: Site) -> RunSpec:
    fields = dict(fields)
    ranks_per_node = fields.pop("ranks_per_node", max(1, fields.get("gpus_per_node", 0)))
    if fields.get("image") and fields.get("fabric"):
        fields["image"] = fields["image"].replace("{fabric}", fields["fabric"])
    time_limit = None
    if fields.get("launcher") in SLURM_LAUNCHERS:
        time_limit = (
            str(slurm.minutes_for(experiment.time_limit_s)) if experiment.time_limit_s else site.scheduler.slurm_time()
        )
    spec = RunSpec(
        **fields, ranks=fields.get("nodes", 1) * ranks_per_node, extra_env=dict(experiment.env), time_limit=time_limit
    )
    if getattr(LAUNCHERS.get(spec.launcher), "emulated", False) and spec.nodes == 1:  # unknown: refused later
        # the emulated nodes share this machine's cores: the 1-node point (the baseline) gets one
        # rank's share of the largest emulated run, not the whole machine (and no oversubscription)
        env = dict(spec.extra_env)
        if "OMP_NUM_THREADS" not in env:
            nodes = experiment.matrix.get("nodes") or (experiment.fixed.get("nodes", 1),)
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (max(nodes) * ranks_per_node)))
        spec = dataclasses.replace(spec, launcher=LOCAL.name, fabric=None, link_rate=None, extra_env=env)
    return spec


def baseline_of(spec: RunSpec) -> RunSpec:
    """The 1-rank run that scaling efficiency divides by: one node, one rank, no network."""
    return dataclasses.replace(
        spec,
        nodes=1,
        ranks=1,
        fabric=None,
        allreduce=None,
        gpudirect=None,
        nvls=None,  # one rank: nothing to reduce in a switch
        sharp=None,
        link_rate=None,
        hostfile=None,
        gpus_per_node=min(spec.gpus_per_node, 1),
        fp16_allreduce=False,
        launcher=LOCAL.name if launcher_of(spec).emulated else spec.launcher,
    )


SAME_AS_BASELINE = RunSpec.fields_where("baseline")


def measures_alone(candidate: RunSpec, spec: RunSpec) -> bool:
    """Whether `candidate`, a point of the matrix, is the 1-rank baseline `spec` needs."""
    return candidate.ranks == 1 and all(getattr(candidate, f) == getattr(spec, f) for f in SAME_AS_BASELINE)


def blame(experiment: Experiment, error: UsageError) -> UsageError:
    """A RunSpec or site error, re-worded to name the experiment key it is about.

    The key is the first of the error's fields that the file sets, [matrix] keys
    first: a varying axis is the likelier culprit. The file sets ranks_per_node,
    where a RunSpec has ranks."""
    named = [{"ranks": "ranks_per_node"}.get(n, n) for n in error.fields]
    keys = [n for n in named if n in experiment.matrix] + [n for n in named if n in experiment.fixed]
    if keys:
        return experiment.error(keys[0], str(error))
    return UsageError(f"{experiment.path.name}: [run]: {error}")


def _validated(experiment: Experiment, spec: RunSpec) -> RunSpec:
    try:
        return spec.validated()
    except UsageError as exc:
        raise blame(experiment, exc) from None


def _check_nodes(experiment: Experiment, spec: RunSpec) -> None:
    if launcher_of(spec) is MPIRUN and spec.nodes > 1 and not spec.hostfile:
        raise experiment.error("nodes", f"{spec.nodes} nodes under the mpirun launcher need [run].hostfile")


def _identity(spec: RunSpec) -> tuple:
    """A spec's value as a hashable tuple (its one table, extra_env, as sorted pairs): equal specs,
    equal identities."""
    values = (getattr(spec, f.name) for f in dataclasses.fields(spec))
    return tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in values)


def expand(experiment: Experiment, site: Site | None = None, launcher: str | None = None) -> list[Point]:
    """Every run of the experiment, each baseline just before the first run it serves; pure (no I/O).

    `launcher` overrides the file's and the site's (e.g. srun inside one sbatch job).
    """
    site = site or Site.default()
    base = {**_defaults(experiment, site), **experiment.fixed}
    if launcher:
        base["launcher"] = launcher
    names = list(experiment.matrix)
    specs: list[RunSpec] = []
    known: set[tuple] = set()  # the specs' identities: a matrix of thousands compares by hash, not pairwise
    defaults = dataclasses.asdict(RunSpec())
    survivors: dict[str, set] = {name: set() for name in names}
    reasons: dict[tuple[str, Any], str] = {}
    for combo in itertools.product(*experiment.matrix.values()):
        fields = read_fields(experiment, {**base, **dict(zip(names, combo))})
        reason = _dropped(experiment, {**defaults, **fields})
        if reason:
            for name, value in zip(names, combo):
                reasons.setdefault((name, value), reason)
            continue
        for name, value in zip(names, combo):
            survivors[name].add(value)
        spec = _validated(experiment, _spec(experiment, fields, site))
        _check_nodes(experiment, spec)
        if _identity(spec) not in known:  # a benchmark that does not read a varied field runs once
            known.add(_identity(spec))
            specs.append(spec)
    for name in names:
        for value in experiment.matrix[name]:
            if value not in survivors[name]:
                raise experiment.error(
                    name,
                    f"{value!r} is in no runnable combination ({reasons.get((name, value), 'see the other keys')})",
                )
    one_rank = [c for c in specs if c.ranks == 1]
    baselines = [
        next((c for c in one_rank if measures_alone(c, spec)), None) or _validated(experiment, baseline_of(spec))
        for spec in specs
    ]
    serving = {_identity(b) for b in baselines}
    points, seen = [], set()
    for repetition in range(experiment.repetitions):
        for spec, baseline in zip(specs, baselines):
            for point in (
                Point(baseline, repetition, baseline=True),
                Point(spec, repetition, _identity(spec) in serving),
            ):
                if point.key not in seen:
                    seen.add(point.key)
                    points.append(point)
    return points


# ------------------------------------------------------------ placeholders


def placeholder_site(experiment: Experiment, site: Site | None = None) -> tuple[Site, list[str]]:
    """A site that has every fabric the experiment names, with placeholders where a site file
    must give values; and the `[fabrics.X] key` list of what it must fill in. For dry runs
    without a site file: a cluster run prepared on a laptop."""
    from containers.fabrics import HOST_FABRICS, is_emulated, profile
    from launch.site.config import FabricSite

    site = site or Site.default()
    values = experiment.matrix.get("fabric") or ((experiment.fixed["fabric"],) if "fabric" in experiment.fixed else ())
    fabrics, missing = dict(site.fabrics), []
    for fabric in values:
        if not isinstance(fabric, str) or is_emulated(fabric) or fabric in fabrics or fabric not in HOST_FABRICS:
            continue
        needs = profile(fabric)
        device_key, paths = needs.site_device_key, needs.site_path_keys
        settings = tuple(key.name for key in needs.site_keys)
        fabrics[fabric] = FabricSite(
            interface=f"<{fabric}.interface>",
            device=f"<{fabric}.{device_key}>" if device_key else None,
            host_paths=tuple((key, f"/<{fabric}.{key}>") for key in paths),
            settings=tuple((key, f"<{fabric}.{key}>") for key in settings),
        )
        keys = ["interface"] + ([device_key] if device_key else []) + list(paths) + list(settings)
        missing.append(f"[fabrics.{fabric}] {', '.join(keys)}")
    return dataclasses.replace(site, fabrics=fabrics), missing
