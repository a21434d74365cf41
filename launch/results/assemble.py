"""Turn rank records into one result (result.json); launch.results.result reads it back.

A result is written once, atomically, and never rewritten.
"""
from __future__ import annotations

import secrets
import time
from pathlib import Path

from bench.stats import summarize
from containers.files import write_json_atomic
from launch.results.result import SCHEMA_VERSION
from launch.results.comm import allreduce_metrics, halo_metrics
from launch.errors import UsageError
from launch.ranks.heartbeat import stragglers



def new_run_id(*parts: object) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    label = "-".join(str(p) for p in parts if p not in (None, ""))
    return f"{stamp}-{label}-{secrets.token_hex(3)}"


def elementwise_sum(rows: list[list[float]]) -> list[float]:
    n = min(len(r) for r in rows)
    return [sum(r[i] for r in rows) for i in range(n)]


def train_metrics(records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
    """Throughput, communication share and parameter agreement of a training run."""
    problems = []
    by_rank = {r["rank"]: r for r in records if r["kind"] == "train"}
    missing = sorted(set(range(world_size)) - set(by_rank))
    if missing:
        problems.append(f"ranks {missing} wrote no train record")
    if not by_rank:
        return {}, problems
    ranks = [by_rank[k] for k in sorted(by_rank)]
    totals = elementwise_sum([r["samples_img_per_s"] for r in ranks])  # all ranks step together
    total = summarize(totals)
    rank_means = [summarize(r["samples_img_per_s"]).mean for r in ranks]
    compute_means = [summarize(r["compute_samples_img_per_s"]).mean for r in ranks]
    # time share of a step not explained by the same step without gradient exchange
    shares = [1.0 - train / compute for train, compute in zip(rank_means, compute_means)]
    diff = max(r["params_max_abs_diff"] for r in ranks)
    if diff > tolerance:
        problems.append(f"parameters differ across ranks (max |diff| {diff:.3g} > {tolerance:g})")
    metrics = {
        "throughput": {
            "total_img_per_s": total.mean,
            "per_rank_img_per_s": total.mean / len(ranks),
            "ci95_img_per_s": total.ci95,
            "median_total_img_per_s": total.median,
            "n_samples": total.n,
            "rank_img_per_s": rank_means,
        },
        "samples": {
            "total_img_per_s": totals,
            "rank_img_per_s": [r["samples_img_per_s"] for r in ranks],
            "rank_compute_img_per_s": [r["compute_samples_img_per_s"] for r in ranks],
        },
        "compute_img_per_s": sum(compute_means),
        "comm_fraction": min(1.0, max(0.0, sum(shares) / len(shares))),
        "comm_fraction_raw": sum(shares) / len(shares),
        "params_max_abs_diff": diff,
        "params_sha256": sorted({r["params_sha256"] for r in ranks}),
        "gradient_bytes": ranks[0].get("gradient_bytes"),
        "numerics": ranks[0].get("numerics"),  # bench.numerics; None in results from before it
        "wire": ranks[0].get("wire"),  # bench.numerics.wire: dtype, bytes, buckets; None before it
        "versions": ranks[0].get("versions", {}),
        "engine_info": ranks[0].get("engine_info", {}),
        "device": ranks[0].get("device"),
        "hosts": sorted({r["host"] for r in ranks}),
        "step_time_s": ranks[0]["config"]["batch_size"] / rank_means[0] if rank_means[0] else None,
        # ranks slower than the median on the step without exchange (launch.ranks.heartbeat)
        "stragglers": stragglers([r["compute_samples_img_per_s"] for r in ranks], ranks[0]["config"]["batch_size"]),
    }
    return metrics, problems


def progress_of(records: list[dict]) -> dict:
    """Per rank: the last step reached and the img/s samples of each phase so far (bench.progress)."""
    ranks: dict[int, dict] = {}
    for record in records:
        if record["kind"] != "progress":
            continue
        rank = ranks.setdefault(record["rank"], {"rank": record["rank"], "samples_img_per_s": {}})
        rank["samples_img_per_s"].setdefault(record["phase"], []).append(record["sample_img_per_s"])
        rank.update(phase=record["phase"], step=record["step"], iters=record["iters"],
                    step_end_unix=record["step_end_unix"])
    return {"ranks": [ranks[k] for k in sorted(ranks)]}


# benchmark kind (launch.kinds) -> (its rank records, world size, tolerance) -> (result fields, problems)
ASSEMBLERS = {"train": train_metrics, "allreduce": allreduce_metrics, "halo": halo_metrics}


def assemble(*, run_id: str, spec: dict, argv: list[str], env: dict, records: list[dict],
             exit_code: int, log_tail: list[str], seconds: float, tolerance: float = 1e-6,
             reason: str | None = None, extra: dict | None = None) -> dict:
    """The result of one run. `status` is `ok` only if every rank proved its work."""
    problems = [reason] if reason else []
    errors = [f"rank {r['rank']}: {r['error']}" for r in records if r["kind"] == "error"]
    problems += errors
    metrics, metric_problems = ASSEMBLERS[spec["benchmark"]](records, spec["ranks"], tolerance)
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
        **metrics,
        **(extra or {}),
    }
    result.setdefault("versions", {})
    return result


def write_result(run_dir: Path, result: dict) -> Path:
    path = run_dir / "result.json"
    if path.exists():
        raise UsageError(f"{path} exists; results are never rewritten")
    return write_json_atomic(path, result)


