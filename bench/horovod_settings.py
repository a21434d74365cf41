"""Horovod knobs shared by the torch and tf engines: tuning passed through the
environment before hvd.init(), and what the engine reports about itself; and how
the allreduce benchmark waits for a Horovod operation."""

from __future__ import annotations

import argparse
import os
import time
from types import ModuleType

# Horovod's synchronize() waits in a sched_yield loop that keeps a core busy. Where the
# nodes share this host's cores (the emulated launcher sets this to "poll") that loop
# starves the other ranks' Horovod threads, which do the exchange: there the allreduce
# benchmark polls, spinning briefly as Horovod does, then sleeping a small share of the
# time waited so far. (Training keeps Horovod's wait: polling there too gave no
# consistent change in benchmarks/predict_validation.py's Horovod steps, 0.5-5 Gbit.)
WAIT_ENV = "FABRIC_BENCH_HOROVOD_WAIT"
SPIN_S, PAUSE_SHARE, MAX_PAUSE_S = 2e-4, 0.05, 1e-3


def apply_tuning(args: argparse.Namespace) -> None:
    """--fusion-threshold-mb / --cycle-time-ms as Horovod's variables (read at init)."""
    if args.fusion_threshold_mb is not None:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        os.environ["HOROVOD_CYCLE_TIME"] = str(args.cycle_time_ms)


def polls() -> bool:
    return os.environ.get(WAIT_ENV) == "poll"


def wait(hvd: ModuleType, handle: int) -> object:
    """synchronize(handle), polling until it is done first where the nodes share cores."""
    if polls():
        start = time.perf_counter()
        while not hvd.poll(handle):
            waited = time.perf_counter() - start
            if waited > SPIN_S:
                time.sleep(min(MAX_PAUSE_S, waited * PAUSE_SHARE))
    return hvd.synchronize(handle)


def gpu_operations(hvd: ModuleType) -> str:
    """The library Horovod's GPU operations were built with (HOROVOD_GPU_OPERATIONS; fixed in the
    build, whatever HOROVOD_CPU_OPERATIONS says): nccl, mpi (CUDA-aware MPI: a build with CUDA
    and MPI but no NCCL) or none (no GPU operations: GPU tensors would go through the CPU ones)."""
    if hvd.nccl_built():
        return "nccl"
    cuda_built = getattr(hvd, "cuda_built", lambda: False)
    return "mpi" if cuda_built() and hvd.mpi_built() else "none"


def build_folder(hvd: ModuleType) -> str:
    """The imported horovod package's folder: the image's own build, or its second one (containers.stack)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(hvd.__file__ or "")))


def describe(hvd: ModuleType, fp16_allreduce: bool) -> dict:
    return {
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
        "mpi_threads_supported": bool(hvd.mpi_threads_supported()) if hvd.mpi_enabled() else None,
        "nccl_built": bool(hvd.nccl_built()),
        "gpu_ops": gpu_operations(hvd),
        "horovod_build": build_folder(hvd),
        "cpu_ops": os.environ.get("HOROVOD_CPU_OPERATIONS", "default"),
        "fp16_compression": fp16_allreduce,
        "fusion_threshold_bytes": os.environ.get("HOROVOD_FUSION_THRESHOLD"),
        "cycle_time_ms": os.environ.get("HOROVOD_CYCLE_TIME"),
    }
