"""The collective micro-benchmarks as one kind, parametrised by the collective (bench.collectives:
its name, backends, busbw factor and exchange code): every rank runs bench.collective, which times
the collective at doubling message sizes with nccl-tests' definitions. What the size sweeps share
(their rows, figures, table, plausibility figure) is launch.kinds.sizes'; the instances are
registered in launch.kinds.collectives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from bench.collectives import Collective as Exchanged
from launch.kinds import sizes
from launch.kinds.kind import TRAINING_FIELDS, Bound, Figure, Judged, Kind, Spec
from launch.schema import ResultSchema

if TYPE_CHECKING:
    from rich.table import Table


class Collective(Kind):
    """One collective of bench.collectives as a benchmark kind named after it."""

    summary = "collective micro-benchmark"
    programs = {"torch": "bench.collective", "tf": "bench.collective"}
    not_read = TRAINING_FIELDS + ("allreduce", "grid")
    plausibility_rule = "the median busbw of its largest messages, against the line rate"
    fields = sizes.SweepFields
    communicates_by = "backend"

    def __init__(self, collective: Exchanged, identified_by: Optional[str] = None, fits_alpha_beta: bool = False):
        """`identified_by`: the field that names it in results from before `benchmark` was written;
        `fits_alpha_beta`: its rows fit the ring allreduce alpha-beta model (launch.predict.model)."""
        self.collective = collective
        self.name = collective.name
        self.workload = collective.workload
        self.options = sizes.options(tuple(collective.backends))
        self.metric = sizes.busbw_metric(collective.name)
        self.sizes_plot = f"{collective.title} bus bandwidth vs message size"
        self.identified_by = identified_by
        self.fits_alpha_beta = fits_alpha_beta

    def bench_args(self, spec: Spec) -> list[str]:
        return ["--collective", self.name, *sizes.bench_args(spec)]

    def label_parts(self, spec: Spec) -> tuple[str, ...]:
        return (self.name, spec.backend)

    def validate(self, spec: Spec) -> None:
        sizes.validate(spec, tuple(self.collective.backends))

    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        return sizes.assemble(records, self.name, world_size)

    def subject(self, fields: ResultSchema) -> str:
        return self.name

    def table(self, fields: ResultSchema) -> Table:
        return sizes.table(fields, self.collective.title)

    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        return sizes.judged(fields, self.name)

    def gpu_engine(self, fields: ResultSchema) -> Optional[str]:
        backend = getattr(fields, "backend", None)
        return sizes.BACKEND_ENGINES.get(backend or "", backend)

    def busbw_factor(self, ranks: int) -> Optional[float]:
        return self.collective.busbw_factor(ranks)

    def factor_of(self, fields: ResultSchema) -> Optional[float]:
        return self.busbw_factor(fields.world_size) if fields.world_size else None

    def figures(self, fields: ResultSchema) -> list[Figure]:
        return sizes.figures(fields, self.factor_of(fields))

    def bounds(self, fields: ResultSchema) -> list[Bound]:
        return sizes.bounds(fields, self.factor_of(fields))

    def disagreements(self, fields: ResultSchema) -> list[str]:
        return sizes.disagreements(fields, self.factor_of(fields))

    def measured_at(self, fields: ResultSchema) -> tuple:
        return tuple(sizes.size_name(row) for row in sizes.rows_of(fields))

    def curve(self, fields: ResultSchema) -> list[tuple[float, float]]:
        return sizes.curve(fields)

    def own_bytes(self, fields: ResultSchema, ranks: int, per_node: int) -> Optional[tuple[float, str]]:
        # each rank's link carries the payload x busbw's factor (nccl-tests' busbw is exactly that)
        return sizes.own_bytes(fields, ranks, per_node, self.collective.busbw_factor(ranks), self.name)
