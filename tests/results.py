"""Result builders shared by the tests: the shape of a result.json in one place
(launch.results.assemble writes it); each test passes only what it is about."""
from __future__ import annotations

import json
import math
from pathlib import Path

from scipy import stats as scipy_stats


def train_result(run_id: str, *, img: float | None, ranks: int = 2, fabric: str | None = "ethernet",
                 engine: str = "ddp", model: str = "resnet18", status: str = "ok", ci: float = 1.0,
                 comm: float | None = 0.3, spec: dict | None = None, samples: list[float] | None = None,
                 **extra) -> dict:
    """A training result: `img` is the total img/s (None: a run that measured nothing). Like a
    result assemble writes, it carries the samples its mean and interval come from (three,
    spread to give `ci`), unless `samples` are given."""
    throughput = {"total_img_per_s": img, "ci95_img_per_s": ci}
    if samples is None and img is not None and ci is not None:
        spread = ci / (scipy_stats.t.ppf(0.975, 2) / math.sqrt(3))   # 3 samples img -/0/+ spread
        samples = [img - spread, img, img + spread]
    if img is not None:
        throughput["per_rank_img_per_s"] = img / ranks
    result = {"schema_version": 1, "run_id": run_id, "benchmark": "train", "framework": "torch",
              "engine": engine, "model": model, "world_size": ranks, "status": status,
              "spec": {"fabric": fabric, **(spec or {})}, "throughput": throughput, "comm_fraction": comm}
    if samples is not None:
        result["samples"] = {"total_img_per_s": list(samples)}
    return {**result, **extra}


def allreduce_result(run_id: str, *, sizes: list[dict], ranks: int = 2, fabric: str | None = "ethernet",
                     backend: str = "mpi", status: str = "ok", **extra) -> dict:
    return {"schema_version": 1, "run_id": run_id, "benchmark": "allreduce", "world_size": ranks,
            "status": status, "spec": {"fabric": fabric}, "backend": backend, "sizes": sizes, **extra}


def only_result(results_dir: Path) -> dict:
    """The one result.json a run wrote under results_dir (fails if there is not exactly one)."""
    (path,) = Path(results_dir).glob("*/result.json")
    return json.loads(path.read_text())
