"""Horovod knobs shared by the torch and tf engines: tuning passed through the
environment before hvd.init(), and what the engine reports about itself."""
from __future__ import annotations

import os


def apply_tuning(args) -> None:
    """--fusion-threshold-mb / --cycle-time-ms as Horovod's variables (read at init)."""
    if args.fusion_threshold_mb is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        os.environ["HOROVOD_CYCLE_TIME"] = str(args.cycle_time_ms)


def describe(hvd, fp16_allreduce: bool) -> dict:
    return {
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
        "mpi_threads_supported": bool(hvd.mpi_threads_supported()) if hvd.mpi_enabled() else None,
        "nccl_built": bool(hvd.nccl_built()),
        "gpu_ops": "nccl" if hvd.nccl_built() else "none",
        "cpu_ops": os.environ.get("HOROVOD_CPU_OPERATIONS", "default"),
        "fp16_compression": fp16_allreduce,
        "fusion_threshold_bytes": os.environ.get("HOROVOD_FUSION_THRESHOLD"),
        "cycle_time_ms": os.environ.get("HOROVOD_CYCLE_TIME"),
    }
