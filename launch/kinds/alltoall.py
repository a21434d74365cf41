"""The all-to-all micro-benchmark (bench.alltoall): the traffic of MoE expert dispatch and of
tensor-parallel layouts, every rank sending a distinct block to every other; nccl-tests'
definitions, busbw = algbw x (n-1)/n."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from bench.alltoall import busbw_factor

from launch.kinds import sizes
from launch.kinds.kind import TRAINING_FIELDS, Judged, Kind
from launch.results.schema import ResultSchema

if TYPE_CHECKING:
    from rich.table import Table

    from launch.ranks.runspec import RunSpec

BACKENDS = ("mpi", "torch")  # MPI_Alltoall (mpi4py), torch.distributed.all_to_all_single (gloo, NCCL)


class Alltoall(Kind):
    name = "alltoall"
    summary = "all-to-all micro-benchmark"
    programs = {"torch": "bench.alltoall", "tf": "bench.alltoall"}
    not_read = TRAINING_FIELDS + ("allreduce", "grid")
    options = sizes.options(BACKENDS)
    plausibility_rule = "the median busbw of its largest messages, against the line rate"
    metric = sizes.busbw_metric("alltoall")
    fields = sizes.SweepFields
    communicates_by = "backend"
    sizes_plot = "All-to-all bus bandwidth vs message size"

    def bench_args(self, spec: "RunSpec") -> list[str]:
        return sizes.bench_args(spec)

    def label_parts(self, spec: "RunSpec") -> tuple[str, ...]:
        return (self.name, spec.backend)

    def validate(self, spec: "RunSpec") -> None:
        sizes.validate(spec, BACKENDS, "exchanges")

    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        return sizes.assemble(records, self.name, world_size)

    def subject(self, fields: ResultSchema) -> str:
        return self.name

    def table(self, fields: ResultSchema) -> Table:
        return sizes.table(fields, "All-to-all")

    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        return sizes.judged(fields, self.name)

    def gpu_engine(self, fields: ResultSchema) -> Optional[str]:
        backend = getattr(fields, "backend", None)
        return sizes.BACKEND_ENGINES.get(backend or "", backend)

    def busbw_factor(self, ranks: int) -> Optional[float]:
        return busbw_factor(ranks)

    def own_bytes(self, fields: ResultSchema, ranks: int, per_node: int) -> Optional[tuple[float, str]]:
        return sizes.own_bytes(fields, ranks, per_node, (ranks - 1) / ranks, "alltoall")  # all but its own block


KIND = Alltoall()
