"""The benchmark kinds: what each one is, the bench program its ranks run per framework, the
RunSpec fields it does not read, whether it is a training workload, and the figure its runs
are compared by. Every module that treats kinds differently asks this registry.

Adding a kind: its bench program (bench/<kind>.py), its entry here, and how its rank records
become result fields (launch.results.assemble's ASSEMBLERS; a test keeps that table whole).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

# RunSpec fields that only a training workload reads
TRAINING_FIELDS = ("framework", "engine", "model", "batch_size", "image_size", "precision", "controller",
                   "fp16_allreduce", "fusion_threshold_mb", "cycle_time_ms", "bucket_cap_mb", "batches_per_iter",
                   "tf32", "memory_format", "cudnn_benchmark")


@dataclass(frozen=True)
class Metric:
    name: str           # field name, units in it
    label: str          # what a reader is told
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Kind:
    name: str
    summary: str
    programs: Mapping[str, str]     # framework -> the bench module every rank runs
    # fields it does not read: where an experiment's [matrix] varies `benchmark`, they are reset
    # to RunSpec's defaults for it and the duplicates this makes are dropped (launch.runs.experiment)
    not_read: tuple[str, ...]
    metric: Metric                  # what its points are compared by (launch.results.aggregate)
    trains: bool = False            # a training workload: engines, models, img/s, placement
    # what its ranks communicate through, as series names and verdicts show it: the RunSpec/result
    # field that says so (train: the engine, allreduce: the backend), or a kind with one way only
    communicates_by: str | None = None
    communicates_always: str = "-"


TRAIN = Kind("train", "data-parallel training", {"torch": "bench.torch_train", "tf": "bench.tf_train"},
             not_read=("grid", "backend", "min_bytes", "max_bytes"),
             metric=Metric("total_img_per_s", "throughput", "img/s", True), trains=True, communicates_by="engine")
ALLREDUCE = Kind("allreduce", "micro-benchmark", {"torch": "bench.allreduce", "tf": "bench.allreduce"},
                 not_read=TRAINING_FIELDS + ("allreduce", "grid"),
                 metric=Metric("busbw_gbit_s", "bus bandwidth at the largest message", "Gbit/s", True),
                 communicates_by="backend")
HALO = Kind("halo", "3-D stencil", {"torch": "bench.halo", "tf": "bench.halo"},
            not_read=TRAINING_FIELDS + ("allreduce", "gpudirect", "backend", "min_bytes", "max_bytes"),
            metric=Metric("time_per_iter_s", "time per iteration", "s", False), communicates_always="mpi")

KINDS: Mapping[str, Kind] = {k.name: k for k in (TRAIN, ALLREDUCE, HALO)}
BENCHMARKS = tuple(KINDS)


def kind(name: str | None) -> Kind:
    """The kind named (a RunSpec's benchmark is validated before anything asks)."""
    return KINDS[name] if name else TRAIN


def trains(name: str | None) -> bool:
    return name is not None and name in KINDS and KINDS[name].trains
