"""The end of every training benchmark: judge the parameter check, write the
rank's `train` record, print rank 0's summary (shared by torch and tf)."""

from __future__ import annotations

import argparse
from typing import Protocol

from bench import numerics, placement, train_args
from bench.record import write_record


class Engine(Protocol):
    """What the end of a run asks of a training engine (bench.torch_engines, bench.tf_engines)."""

    rank: int
    size: int
    local_rank: int

    def describe(self) -> dict: ...

    def shutdown(self) -> None: ...


def finish(
    args: argparse.Namespace,
    engine: Engine,
    *,
    framework: str,
    device: str,
    threads: int | None,
    versions: dict,
    parameters: int,
    numerics_used: dict,
    samples: list[float],
    compute_samples: list[float],
    train_seconds: float,
    params_max_abs_diff: float,
    params_sha256: str,
) -> int:
    """Write the record and shut the engine down; the exit code says whether ranks agreed."""
    status = "ok" if params_max_abs_diff <= args.param_tolerance else "failed"
    info = engine.describe()
    try:  # where this rank sits (bench.placement); never the reason a finished run fails
        where = placement.rank_placement(engine.local_rank, gpu="cpu" not in str(device).lower())
    except Exception as exc:  # noqa: BLE001
        where = {"unknown": f"placement not read: {type(exc).__name__}: {exc}"}
    write_record(
        args.record_dir,
        engine.rank,
        "train",
        benchmark="train",
        framework=framework,
        engine=args.engine,
        model=args.model,
        world_size=engine.size,
        local_rank=engine.local_rank,
        device=device,
        threads=threads,
        config=train_args.config_of(args),
        engine_info=info,
        versions=versions,
        gradient_bytes=numerics.WIRE_BYTES[numerics_used["gradient_wire_dtype"]] * parameters,
        parameters=parameters,
        numerics=numerics_used,
        wire=numerics.wire(args, info, parameters),
        samples_img_per_s=samples,
        compute_samples_img_per_s=compute_samples,
        train_seconds=train_seconds,
        params_max_abs_diff=params_max_abs_diff,
        params_sha256=params_sha256,
        status=status,
        placement=where,
    )
    if engine.rank == 0:
        mean = sum(samples) / len(samples)
        print(
            f"[rank 0] {args.engine} {args.model} x{engine.size}: {mean:.1f} img/s per rank, "
            f"parameters max |diff| {params_max_abs_diff:.3g} ({status})",
            flush=True,
        )
    engine.shutdown()
    return 0 if status == "ok" else 1
