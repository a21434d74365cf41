"""The result schema, declared once: the shapes of the result.json fields readers share, the
schema's version and the migration of older results, the store's indexed columns, and the
JSON Schema published for other tools (docs/reference/result.schema.json).

A result is an open document: assemble writes more fields than are declared here (per
benchmark: rank samples, placement, stall, ...), and those pass through unchanged. What IS
declared is what more than one reader relies on, and every result from elsewhere is checked
against it before a report or a comparison uses it (`problem`). Each field's shape names the
words of its complaint ("engine is not text"), so one line tells a user what is wrong.

    python -m launch.results.schema > docs/reference/result.schema.json
"""
from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

SCHEMA_VERSION = 3             # what assemble writes
READABLE_SCHEMAS = (1, 2, 3)   # what is read; older versions are migrated to the current one on load
# launch.disturbance.judge.VERDICTS (spelled here too: the schema module imports nothing of launch)
DISTURBANCE_VERDICTS = ("clean", "disturbed", "not recorded")
NOT_RECORDED = {"verdict": "not recorded", "causes": []}


# ------------------------------------------------------------------ shapes

def _shape(check, words: str):
    """A BeforeValidator: None passes, anything `check` refuses is a one-line complaint."""
    def validate(value: Any) -> Any:
        if value is not None and not check(value):
            raise PydanticCustomError("shape", words)
        return value
    return BeforeValidator(validate)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _finite_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_finite(v) for v in value)


Text = Annotated[Optional[str], _shape(lambda v: isinstance(v, str), "is not text")]
FiniteNumber = Annotated[Optional[float], _shape(_is_finite, "is not a finite number")]
# a 1-sample run's confidence interval is Infinity: a number, not necessarily finite
Number = Annotated[Optional[float], _shape(_is_number, "is not a number")]
PositiveInt = Annotated[Optional[int], _shape(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                                              "is not a positive integer")]
_AN_OBJECT = _shape(lambda v: isinstance(v, dict), "is not an object")
Object = Annotated[Optional[dict[str, Any]], _AN_OBJECT]
Names = Annotated[Optional[list[str]], _shape(lambda v: isinstance(v, list) and all(isinstance(h, str) for h in v),
                                              "is not a list of names")]
Samples = Annotated[list[float], _shape(_finite_list, "is not a non-empty list of finite numbers")]
RankSamples = Annotated[list[list[float]], _shape(lambda v: isinstance(v, list) and all(_finite_list(r) for r in v),
                                                  "is not a non-empty list of finite numbers")]


class _Open(BaseModel):
    """Declared fields are checked; fields not declared pass through."""
    model_config = ConfigDict(extra="allow")


class Spec(_Open):
    """The RunSpec the run was made from (launch.ranks.runspec; its own checks run when it is replayed)."""
    fabric: Text = None
    engine: Text = None
    model: Text = None
    launcher: Text = None
    runtime: Text = None
    precision: Text = None


class Throughput(_Open):
    total_img_per_s: Number = None
    ci95_img_per_s: Number = None
    per_rank_img_per_s: Number = None


class SamplesOf(_Open):
    """Per-iteration samples: the run's total img/s, and per rank (a list per rank)."""
    total_img_per_s: Optional[Samples] = None
    rank_img_per_s: Optional[RankSamples] = None
    rank_compute_img_per_s: Optional[RankSamples] = None


class SizeRow(_Open):
    """One message size of an allreduce run."""
    bytes: FiniteNumber = None
    time_us: FiniteNumber = None
    busbw_gbit_s: FiniteNumber = None
    algbw_gbit_s: FiniteNumber = None


Rows = Annotated[Optional[list[SizeRow]], _shape(lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v),
                                                 "is not a list of rows")]


class Cause(_Open):
    """One named cause of a disturbance: the signal (cpu, steal, memory, stopped, traffic, gpu, steps)
    and what it was, in words ("other processes used 0.92 of a core during the timed window")."""
    signal: Text = None
    words: Text = None


Causes = Annotated[Optional[list[Cause]], _shape(lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v),
                                                 "is not a list of causes")]


class Disturbance(_Open):
    """Was the run disturbed while it was timed, and by what (launch.disturbance; docs/disturbance.md).
    `signals` holds each signal's figures, limit and verdict; `sampler` the sampler's own cost."""
    verdict: Annotated[Optional[str], _shape(lambda v: v in DISTURBANCE_VERDICTS,
                                             "is not one of " + ", ".join(DISTURBANCE_VERDICTS))] = None
    causes: Causes = None
    signals: Object = None
    window: Object = None
    sampler: Object = None


class ResultSchema(_Open):
    """One run's result.json (launch.results.assemble writes it; launch.results.result reads it)."""
    schema_version: Literal[3]
    run_id: str
    status: Text = None             # ok | failed | interrupted | stalled
    reason: Text = None
    benchmark: Text = None          # launch.kinds: train | allreduce | halo
    framework: Text = None
    engine: Text = None
    model: Text = None
    backend: Text = None
    device: Text = None
    world_size: PositiveInt = None
    wall_seconds: FiniteNumber = None
    comm_fraction: FiniteNumber = None
    step_time_s: FiniteNumber = None
    compute_img_per_s: FiniteNumber = None
    gradient_bytes: FiniteNumber = None     # per step, as exchanged (the wire dtype's size: numerics)
    link_rate_gbit_s: FiniteNumber = None
    spec: Annotated[Optional[Spec], _AN_OBJECT] = None
    throughput: Annotated[Optional[Throughput], _AN_OBJECT] = None
    samples: Annotated[Optional[SamplesOf], _AN_OBJECT] = None
    sizes: Rows = None
    hosts: Names = None
    engine_info: Object = None
    versions: Object = None
    transport: Object = None
    image: Object = None
    numerics: Object = None         # bench.numerics: precision, TF32, wire dtype (train runs)
    wire: Object = None             # bench.numerics.wire: what went on the wire (dtype, bytes, buckets/fusion)
    origin: Object = None           # which site and bundle wrote it (launch.results.store keys by it)
    disturbance: Annotated[Optional[Disturbance], _AN_OBJECT] = None  # clean | disturbed, with causes


# ------------------------------------------------------------------ reading

def migrate(value: dict) -> dict:
    """A result of a readable older version as the current version holds it.
    1 -> 2: `numerics` and `origin` became fields every result has (null where unknown: results
    from before them); the migrated result says what it was.
    2 -> 3: `disturbance` (launch.disturbance): a result from before it reads as "not recorded"."""
    version = value.get("schema_version")
    if version == 1:
        value = {"numerics": None, "origin": None, **value, "schema_version": 2, "migrated_from": 1}
    if value.get("schema_version") == 2:
        value = {"disturbance": dict(NOT_RECORDED), **value, "schema_version": 3,
                 "migrated_from": value.get("migrated_from", 2)}
    return value


def problem(value: dict) -> Optional[str]:
    """Why a result's declared fields are not of their declared shapes (None: they are), in one
    line: 'throughput.ci95_img_per_s is not a number ('abc')'."""
    try:
        ResultSchema.model_validate(migrate(value))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        found = error.get("input")
        return f"{where} {error['msg']} ({found!r:.60})" if error["type"] == "shape" else f"{where}: {error['msg']}"
    return None


# ------------------------------------------------------------------ the store's columns

# column -> the path of the field it indexes (launch.results.store makes one column each)
INDEXED: dict[str, tuple[str, ...]] = {
    "run_id": ("run_id",), "benchmark": ("benchmark",), "framework": ("framework",), "engine": ("engine",),
    "model": ("model",), "fabric": ("spec", "fabric"), "world_size": ("world_size",), "nodes": ("spec", "nodes"),
    "gpus_per_node": ("spec", "gpus_per_node"), "launcher": ("launch", "launcher"), "runtime": ("launch", "runtime"),
    "status": ("status",), "total_img_per_s": ("throughput", "total_img_per_s"),
    "ci95_img_per_s": ("throughput", "ci95_img_per_s"), "comm_fraction": ("comm_fraction",),
    "transport": ("transport", "verdict"), "image_digest": ("image", "digest"), "replay_of": ("replay_of", "run_id"),
    "disturbance": ("disturbance", "verdict"),
}


def field_at(result: dict, path: tuple[str, ...]) -> Any:
    """The value at `path` (None where any step is missing or not an object)."""
    value: Any = result
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value


def json_schema() -> dict:
    return ResultSchema.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
