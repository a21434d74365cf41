"""The result schema, declared once: the shapes of the result.json fields readers share, the
schema's version and the migration of older results, the store's indexed columns, and the
JSON Schema published for other tools (docs/reference/result.schema.json).

A result is an open document: assemble writes more fields than are declared here (per
benchmark: rank samples, placement, stall, ...), and those pass through unchanged. What IS
declared is what more than one reader relies on, and every result from elsewhere is checked
against it before a report or a comparison uses it (`problem`). Each field's shape names the
words of its complaint ("engine is not text"), so one line tells a user what is wrong.

    python -m launch.schema > docs/reference/result.schema.json
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

SCHEMA_VERSION = 4  # what assemble writes
READABLE_SCHEMAS = (1, 2, 3, 4)  # what is read; older versions are migrated to the current one on load
# launch.disturbance.judge.VERDICTS and STEADINESS (spelled here too: the schema module imports nothing of launch)
DISTURBANCE_VERDICTS = ("clean", "disturbed", "too short to judge", "not recorded")
STEADINESS = ("steady", "unsteady", "not measured")
NOT_RECORDED = {"verdict": "not recorded", "causes": []}


# ------------------------------------------------------------------ shapes


def shape(check, words: str):
    """A BeforeValidator: None passes, anything `check` refuses is a one-line complaint."""

    def validate(value: Any) -> Any:
        if value is not None and not check(value):
            raise PydanticCustomError("shape", words)
        return value

    return BeforeValidator(validate)


def list_of(kind: type, words: str):
    """`shape` of a list whose every item is a `kind` (None passes)."""
    return shape(lambda v: isinstance(v, list) and all(isinstance(item, kind) for item in v), words)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return number(value) is not None


def _finite_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_finite(v) for v in value)


Text = Annotated[Optional[str], shape(lambda v: isinstance(v, str), "is not text")]
FiniteNumber = Annotated[Optional[float], shape(_is_finite, "is not a finite number")]
# a 1-sample run's confidence interval is Infinity: a number, not necessarily finite
Number = Annotated[Optional[float], shape(_is_number, "is not a number")]
PositiveInt = Annotated[
    Optional[int],
    shape(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "is not a positive integer"),
]
Count = Annotated[
    Optional[int], shape(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "is not a count")
]
AN_OBJECT = shape(lambda v: isinstance(v, dict), "is not an object")
Object = Annotated[Optional[dict[str, Any]], AN_OBJECT]
Names = Annotated[
    Optional[list[str]],
    list_of(str, "is not a list of names"),
]
Samples = Annotated[list[float], shape(_finite_list, "is not a non-empty list of finite numbers")]
RankSamples = Annotated[
    list[list[float]],
    shape(
        lambda v: isinstance(v, list) and all(_finite_list(r) for r in v), "is not a non-empty list of finite numbers"
    ),
]


class Open(BaseModel):
    """Declared fields are checked; fields not declared pass through. Frozen: a result is made once,
    where it is read (launch.results.result), and never changed after."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Spec(Open):
    """The RunSpec the run was made from (launch.ranks.runspec; its own checks run when it is replayed):
    the settings readers group and label runs by, typed; the rest kept as extras."""

    fabric: Text = None
    framework: Text = None
    engine: Text = None
    model: Text = None
    batch_size: Count = None
    image_size: Count = None
    warmup: Count = None
    extra_env: Object = None
    launcher: Text = None
    runtime: Text = None
    precision: Text = None
    benchmark: Text = None
    ranks: PositiveInt = None
    nodes: PositiveInt = None
    gpus_per_node: Count = None
    allreduce: Text = None
    gpudirect: Text = None
    nvls: Text = None  # NCCL's in-switch reductions asked on or off (--nvls, --sharp)
    sharp: Text = None
    image: Text = None
    ranks_per_node: Count = None  # an older hand-made spec's (launch.results.result.ranks_per_node)


class Cause(Open):
    """One named cause of a disturbance: the signal (cpu, steal, memory, stopped, traffic, gpu, link,
    steps), what it was, in words ("other processes used 0.92 of a core during the timed window"),
    and, where every node of the run was sampled on its own, the node it was seen on."""

    signal: Text = None
    words: Text = None
    node: Text = None


Causes = Annotated[
    Optional[list[Cause]],
    list_of(dict, "is not a list of causes"),
]


class Disturbance(Open):
    """Was the run disturbed while it was timed, and by what (launch.disturbance; docs/disturbance.md):
    `verdict` and `causes` name outside causes only (others' CPU, steal, memory or I/O pressure,
    foreign traffic, a stopped process, the GPU, a rate-limited node); `too short to judge` where the
    timed window held fewer looks than the judgement needs (never disturbed). `steadiness` is the run's own
    property: its step times after the warm-up varied past a limit (`unsteady`, with
    `unsteady_because`), or not; an unsteady run is kept, with its wider CI. `signals` holds each
    signal's figures, limit and verdict; `sampler` the sampler's own cost; `nodes`, where a Slurm
    run's nodes were each sampled on their own, each node's record."""

    verdict: Annotated[
        Optional[str], shape(lambda v: v in DISTURBANCE_VERDICTS, "is not one of " + ", ".join(DISTURBANCE_VERDICTS))
    ] = None
    causes: Causes = None
    steadiness: Annotated[Optional[str], shape(lambda v: v in STEADINESS, "is not one of " + ", ".join(STEADINESS))] = (
        None
    )
    unsteady_because: Names = None
    signals: Object = None
    window: Object = None
    sampler: Object = None
    nodes: Object = None

    @property
    def disturbed(self) -> bool:
        return self.verdict == "disturbed"

    @property
    def unsteady(self) -> bool:
        return self.steadiness == "unsteady"

    def summary(self) -> str:
        """One cell: 'clean', 'clean, unsteady', 'disturbed: cpu, stopped', 'too short to judge' or 'not recorded'."""
        return summary_text(self.verdict, [str(c.signal) for c in self.causes or []], self.unsteady)


def summary_text(verdict: Any, signals: list[str], unsteady: bool) -> str:
    """'clean', 'disturbed: cpu, stopped', 'too short to judge', 'not recorded', each with
    '; unsteady' where it was."""
    if verdict not in DISTURBANCE_VERDICTS:
        text = "not recorded"
    else:
        text = f"disturbed: {', '.join(signals)}" if verdict == "disturbed" and signals else str(verdict)
    return text + ("; unsteady" if unsteady else "")


class SteadyState(Open):
    """Where the run's steady state began (bench.steady_state: MSER on its per-step figures): the
    warm-up steps its figures leave out, of how many, by which rule ("MSER-5"), and whether the cut
    fell inside the searched first half (`settled`). The samples stay whole in the result."""

    warmup_steps_cut: Count = None
    steps: Count = None
    steps_kept: Count = None
    batch: PositiveInt = None
    rule: Text = None
    settled: Optional[bool] = None


class ResultSchema(Open):
    """One run's result.json (launch.results.assemble writes it; launch.results.result reads it)."""

    schema_version: Literal[4]
    run_id: str
    status: Text = None  # ok | failed | interrupted | stalled
    reason: Text = None
    benchmark: Text = None  # a kind's name (launch.kinds); its own fields are its kind's `fields` model
    framework: Text = None
    engine: Text = None
    model: Text = None
    device: Text = None
    world_size: PositiveInt = None
    wall_seconds: FiniteNumber = None
    comm_fraction: FiniteNumber = None
    link_rate_gbit_s: FiniteNumber = None
    spec: Annotated[Optional[Spec], AN_OBJECT] = None
    hosts: Names = None
    versions: Object = None
    transport: Object = None
    image: Object = None
    origin: Object = None  # which site and bundle wrote it (launch.results.store keys by it)
    disturbance: Annotated[Optional[Disturbance], AN_OBJECT] = None  # clean | disturbed, with causes; steadiness
    steady_state: Annotated[Optional[SteadyState], AN_OBJECT] = None  # the warm-up cut (training results)


def number(value: Any) -> Optional[float]:
    """A finite int or float as float; anything else (None, bool, str, NaN, inf) is None, and so is
    an int no float holds: a file's 10**400 is a valid JSON and TOML integer (float() raises for it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        as_float = float(value)
    except OverflowError:
        return None
    return as_float if math.isfinite(as_float) else None


# ------------------------------------------------------------------ reading


def migrate(value: dict) -> dict:
    """A result of a readable older version as the current version holds it.
    1 -> 2: `numerics` and `origin` became fields every result has (null where unknown: results
    from before them); the migrated result says what it was.
    2 -> 3: `disturbance` (launch.disturbance): a result from before it reads as "not recorded".
    3 -> 4: the step series is no longer a cause: `disturbance.steadiness` says whether the run's
    own steps were steady (steadiness_from_steps); a run disturbed by its steps alone reads as
    clean (or not recorded, where its host was not sampled) and unsteady. No warm-up was cut
    then: such a result has no `steady_state`, and its figures are over every timed step."""
    version = value.get("schema_version")
    if version == 1:
        value = {"numerics": None, "origin": None, **value, "schema_version": 2, "migrated_from": 1}
    if value.get("schema_version") == 2:
        value = {
            "disturbance": dict(NOT_RECORDED),
            **value,
            "schema_version": 3,
            "migrated_from": value.get("migrated_from", 2),
        }
    if value.get("schema_version") == 3:
        value = {
            **value,
            "disturbance": steadiness_from_steps(value.get("disturbance")),
            "schema_version": 4,
            "migrated_from": value.get("migrated_from", 3),
        }
    return value


STEPS_SIGNAL = "steps"  # launch.disturbance.judge.STEPS
HOST_SIGNALS = ("cpu", "memory")  # a record holding either sampled its host (launch.disturbance.judge)


def steadiness_from_steps(record: Any) -> Any:
    """A version-3 disturbance record as version 4 reads it: its `steps` signal ("clean" or
    "disturbed" then) becomes the run's steadiness ("steady" or "unsteady", its reasons kept in
    `unsteady_because`), the steps cause is dropped, and a record whose only cause it was reads
    as clean where its host (or a node) was sampled, else as not recorded. A record without a
    steps signal (not recorded) and anything that is not a record pass unchanged."""
    signals = record.get("signals") if isinstance(record, dict) else None
    steps = signals.get(STEPS_SIGNAL) if isinstance(signals, dict) else None
    if not isinstance(record, dict) or not isinstance(signals, dict) or not isinstance(steps, dict):
        return record
    was = steps.get("verdict")
    steadiness = "unsteady" if was == "disturbed" else "steady" if was == "clean" else "not measured"
    found = steps.get("reasons")
    reasons: list = found if isinstance(found, list) else []
    out = {
        **record,
        "signals": {**signals, STEPS_SIGNAL: {**steps, "verdict": steadiness}},
        "steadiness": steadiness,
        "unsteady_because": [str(r) for r in reasons] if steadiness == "unsteady" else [],
    }
    causes = record.get("causes")
    if isinstance(causes, list):
        out["causes"] = [c for c in causes if not (isinstance(c, dict) and c.get("signal") == STEPS_SIGNAL)]
        if record.get("verdict") == "disturbed" and not out["causes"]:
            held = record.get("nodes")
            nodes: dict = held if isinstance(held, dict) else {}
            sampled = any(name in signals for name in HOST_SIGNALS) or any(
                isinstance(n, dict) and n.get("verdict") in ("clean", "disturbed") for n in nodes.values()
            )
            out["verdict"] = "clean" if sampled else "not recorded"
    return out


def problem(value: dict, model: type[ResultSchema] = ResultSchema) -> Optional[str]:
    """Why a result's declared fields are not of their declared shapes (None: they are), in one
    line: 'throughput.ci95_img_per_s is not a number ('abc')'. `model`: the run's kind's
    (launch.kinds.problem picks it)."""
    try:
        model.model_validate(migrate(value))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        found = error.get("input")
        return f"{where} {error['msg']} ({found!r:.60})" if error["type"] == "shape" else f"{where}: {error['msg']}"
    return None


# ------------------------------------------------------------------ the store's columns

# column -> the path of the field it indexes (launch.results.store makes one column each)
INDEXED: dict[str, tuple[str, ...]] = {
    "run_id": ("run_id",),
    "benchmark": ("benchmark",),
    "framework": ("framework",),
    "engine": ("engine",),
    "model": ("model",),
    "fabric": ("spec", "fabric"),
    "world_size": ("world_size",),
    "nodes": ("spec", "nodes"),
    "gpus_per_node": ("spec", "gpus_per_node"),
    "launcher": ("launch", "launcher"),
    "runtime": ("launch", "runtime"),
    "status": ("status",),
    "total_img_per_s": ("throughput", "total_img_per_s"),
    "ci95_img_per_s": ("throughput", "ci95_img_per_s"),
    "comm_fraction": ("comm_fraction",),
    "transport": ("transport", "verdict"),
    "image_digest": ("image", "digest"),
    "replay_of": ("replay_of", "run_id"),
    "disturbance": ("disturbance", "verdict"),
    "steadiness": ("disturbance", "steadiness"),
}


def field_at(result: dict, path: tuple[str, ...]) -> Any:
    """The value at `path` (None where any step is missing or not an object)."""
    value: Any = result
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


def at(fields: Any, path: str) -> Any:
    """The value at a dotted path of a typed result ('throughput.total_img_per_s'); None where a
    step is missing. Fields a model does not declare are kept as its extras and found too."""
    value = fields
    for step in path.split("."):
        if value is None:
            return None
        value = value.get(step) if isinstance(value, dict) else getattr(value, step, None)
    return value


def json_schema() -> dict:
    return ResultSchema.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
