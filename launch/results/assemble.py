"""Build one result (result.json) from what each stage of a run contributes; launch.results.result
reads it back.

`assemble` turns the rank records into the result's first fields (the kind's own, through its
assembler: launch.kinds); `build` then adds what each later stage contributes (the run's launch
facts, how it ended, its disturbance, transport and plausibility records), each stage seeing the
result so far. Nothing else writes into a result (tests/test_architecture.py). A result is
written once, atomically, and never rewritten.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Callable, Mapping

from containers.files import write_json_atomic
from launch.errors import UsageError
from launch.kinds import kind
from launch.results.result import SCHEMA_VERSION, Result

# a stage of a run: the result so far -> the fields it contributes (a later stage's win)
Stage = Callable[[dict], Mapping[str, object]]  # what a stage adds to the result it reads


def new_run_id(*parts: object) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    label = "-".join(str(p) for p in parts if p not in (None, ""))
    return f"{stamp}-{label}-{secrets.token_hex(3)}"


def progress_of(records: list[dict]) -> dict:
    """Per rank: the last step reached and the img/s samples of each phase so far (bench.progress)."""
    ranks: dict[int, dict] = {}
    for record in records:
        if record["kind"] != "progress":
            continue
        rank = ranks.setdefault(record["rank"], {"rank": record["rank"], "samples_img_per_s": {}})
        rank["samples_img_per_s"].setdefault(record["phase"], []).append(record["sample_img_per_s"])
        rank.update(
            phase=record["phase"], step=record["step"], iters=record["iters"], step_end_unix=record["step_end_unix"]
        )
    return {"ranks": [ranks[k] for k in sorted(ranks)]}


def assemble(
    *,
    run_id: str,
    spec: dict,
    argv: list[str],
    env: dict,
    records: list[dict],
    exit_code: int,
    log_tail: list[str],
    seconds: float,
    tolerance: float = 1e-6,
    reason: str | None = None,
    extra: dict | None = None,
) -> dict:
    """The result of one run. `status` is `ok` only if every rank proved its work."""
    problems = [reason] if reason else []
    errors = [f"rank {r['rank']}: {r['error']}" for r in records if r["kind"] == "error"]
    problems += errors
    metrics, metric_problems = kind(spec["benchmark"]).assemble(records, spec["ranks"], tolerance)
    problems += metric_problems
    if exit_code != 0 and not problems:
        problems.append(f"launcher exited with code {exit_code}")
    result = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "benchmark": spec["benchmark"],
        "framework": spec["framework"],
        "engine": spec["engine"],
        "model": spec["model"],
        "world_size": spec["ranks"],
        "spec": spec,
        "argv": argv,
        "env": env,
        "exit_code": exit_code,
        "wall_seconds": seconds,
        "status": "failed" if problems else "ok",
        "reason": "; ".join(problems) if problems else None,
        "log_tail": log_tail if problems else [],
        "versions": {},
        **metrics,
        **(extra or {}),
    }
    return result


def build(assembled: dict, *stages: Stage) -> Result:
    """The result: the assembled fields, then each stage's contribution in order (each stage reads
    the mapping it is completing); finished, it is read as a Result (its typed model made once)."""
    result = dict(assembled)
    for stage in stages:
        result.update(stage(result))
    return Result(result)


def write_result(run_dir: Path, result: dict) -> Path:
    path = run_dir / "result.json"
    if path.exists():
        raise UsageError(f"{path} exists; results are never rewritten")
    return write_json_atomic(path, result)
