"""Result builders shared by the tests: the shape of a result.json in one place
(launch.results.assemble writes it); each test passes only what it is about."""

from __future__ import annotations

import json
import math
from pathlib import Path

from scipy import stats as scipy_stats

from launch.results.result import Result


def train_result(
    run_id: str,
    *,
    img: float | None,
    ranks: int = 2,
    fabric: str | None = "ethernet",
    engine: str = "ddp",
    model: str = "resnet18",
    status: str = "ok",
    ci: float = 1.0,
    comm: float | None = 0.3,
    spec: dict | None = None,
    samples: list[float] | None = None,
    **extra,
) -> Result:
    """A training result (a Result made in memory: what readers take, launch.results.result): `img` is the total img/s (None: a run that measured nothing). Like a
    result assemble writes, it carries the samples its mean and interval come from (three,
    spread to give `ci`), unless `samples` are given."""
    throughput = {"total_img_per_s": img, "ci95_img_per_s": ci}
    if samples is None and img is not None and ci is not None:
        spread = ci / (scipy_stats.t.ppf(0.975, 2) / math.sqrt(3))  # 3 samples img -/0/+ spread
        samples = [img - spread, img, img + spread]
    if img is not None:
        throughput["per_rank_img_per_s"] = img / ranks
    result = {
        "schema_version": 1,
        "run_id": run_id,
        "benchmark": "train",
        "framework": "torch",
        "engine": engine,
        "model": model,
        "world_size": ranks,
        "status": status,
        "spec": {"fabric": fabric, **(spec or {})},
        "throughput": throughput,
        "comm_fraction": comm,
    }
    if samples is not None:
        result["samples"] = {"total_img_per_s": list(samples)}
    return Result({**result, **extra})


def allreduce_result(
    run_id: str,
    *,
    sizes: list[dict],
    ranks: int = 2,
    fabric: str | None = "ethernet",
    backend: str = "mpi",
    status: str = "ok",
    **extra,
) -> Result:
    return Result(
        {
            "schema_version": 1,
            "run_id": run_id,
            "benchmark": "allreduce",
            "world_size": ranks,
            "status": status,
            "spec": {"fabric": fabric},
            "backend": backend,
            "sizes": sizes,
            **extra,
        }
    )


def only_result(results_dir: Path) -> dict:
    """The one result.json a run wrote under results_dir (fails if there is not exactly one)."""
    (path,) = Path(results_dir).glob("*/result.json")
    return json.loads(path.read_text())


def through_the_bundle(spec, site, run_dir: Path, rank_fields, log: str = "") -> dict:
    """A result made the way launch.runs.run.execute_run makes one, without running the ranks: the real
    plan and command for `spec` on `site` (its env is what the ranks got), each rank's record
    written by bench.record and read back, launch.results.assemble, then the transport evidence
    from `log` (the run's output.log) and the plausibility verdict. `rank_fields(rank)` gives a
    rank's record fields (kind and host included): what that bench program writes."""
    from bench.placement import flags
    from bench.record import read_records, write_record
    from launch.ranks.launchers import build_command
    from launch.results import plausibility, transport
    from launch.kinds import trains
    from launch.results.assemble import assemble, build
    from launch.runs.run import make_plan

    plan, preset = make_plan(spec, run_dir, site)
    command = build_command(spec, plan)
    for rank in range(spec.ranks):
        fields = dict(rank_fields(rank))
        write_record(plan.record_dir, rank, fields.pop("kind"), **fields)
    (run_dir / "output.log").write_text(log, encoding="utf-8")
    records = read_records(plan.record_dir)
    placement = (
        flags(records, transport.nccl_rank_nics(transport.run_log(run_dir / "output.log")))
        if trains(spec.benchmark)
        else None
    )
    assembled = assemble(
        run_id=run_dir.name,
        spec=spec.as_dict(),
        argv=command.argv,
        env=command.env,
        records=records,
        exit_code=0,
        log_tail=[],
        seconds=1.0,
        extra={"placement": placement},
    )
    return build(
        assembled,
        lambda so_far: transport.fields(so_far, run_dir / "output.log"),
        lambda so_far: {"plausibility": plausibility.verdict(so_far, preset.link_gbit_s)},
    )
