"""The allreduce micro-benchmark (bench.allreduce): nccl-tests' definitions, busbw = algbw x 2(n-1)/n."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from bench.allreduce import busbw_factor

from launch.kinds import sizes
from launch.kinds.kind import TRAINING_FIELDS, Judged, Kind
from launch.results.schema import ResultSchema

if TYPE_CHECKING:
    from rich.table import Table

    from launch.ranks.runspec import RunSpec


class Allreduce(Kind):
    name = "allreduce"
    summary = "micro-benchmark"
    programs = {"torch": "bench.allreduce", "tf": "bench.allreduce"}
    not_read = TRAINING_FIELDS + ("allreduce", "grid")
    options = sizes.options(sizes.BACKENDS)
    plausibility_rule = "the median busbw of its largest messages, against the line rate"
    metric = sizes.busbw_metric("allreduce")
    fields = sizes.SweepFields
    communicates_by = "backend"
    identified_by = "sizes"
    sizes_plot = "Allreduce bus bandwidth vs message size"
    fits_alpha_beta = True

    def bench_args(self, spec: "RunSpec") -> list[str]:
        return sizes.bench_args(spec)

    def label_parts(self, spec: "RunSpec") -> tuple[str, ...]:
        return (self.name, spec.backend)

    def validate(self, spec: "RunSpec") -> None:
        sizes.validate(spec, sizes.BACKENDS, "reduces")

    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        return sizes.assemble(records, self.name, world_size)

    def subject(self, fields: ResultSchema) -> str:
        return self.name

    def table(self, fields: ResultSchema) -> Table:
        return sizes.table(fields, "Allreduce")

    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        return sizes.judged(fields, self.name)

    def gpu_engine(self, fields: ResultSchema) -> Optional[str]:
        backend = getattr(fields, "backend", None)
        return sizes.BACKEND_ENGINES.get(backend or "", backend)

    def busbw_factor(self, ranks: int) -> Optional[float]:
        return busbw_factor(ranks)

    def own_bytes(self, fields: ResultSchema, ranks: int, per_node: int) -> Optional[tuple[float, str]]:
        return sizes.own_bytes(fields, ranks, per_node, 2 * (ranks - 1) / ranks, "allreduce")  # the ring's 2(n-1)/n


KIND = Allreduce()
