"""The HPC halo-exchange proxy (bench.halo): a 3-D stencil over MPI, judged by its time per iteration."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Annotated, Optional

from launch.errors import UsageError
from launch.kinds.kind import (
    Spec,
    MAX_SECONDS,
    SMALLEST,
    TRAINING_FIELDS,
    Bound,
    Figure,
    Judged,
    Kind,
    Metric,
    by_rank,
    disagreement,
    finite_samples,
    fmt,
    listed,
    robust_figure,
    status_cell,
    stored_figure,
)
from launch.schema import FiniteNumber, Number, PositiveInt, ResultSchema, Samples, Text, at, shape

if TYPE_CHECKING:
    from rich.table import Table


class HaloFields(ResultSchema):
    grid: PositiveInt = None
    time_per_iter_s: FiniteNumber = None
    time_per_iter_mean_s: FiniteNumber = None
    ci95_s: Number = None
    samples_s: Optional[Samples] = None
    checksum_hex: Text = None
    correct: Annotated[Optional[bool], shape(lambda v: isinstance(v, bool), "is not true or false")] = None


class Halo(Kind):
    name = "halo"
    summary = "3-D stencil"
    programs = {"torch": "bench.halo", "tf": "bench.halo"}
    not_read = TRAINING_FIELDS + (
        "allreduce",
        "gpudirect",
        "nvls",
        "sharp",
        "backend",
        "min_bytes",
        "max_bytes",
        "max_seconds_per_size",
    )
    options = {"grid": "global grid points per edge"}
    plausibility_rule = "not judged: a stencil's time per iteration has no line rate to compare with"
    metric = Metric(
        "time_per_iter_s",
        "time per iteration",
        "s",
        False,
        value_at=("time_per_iter_mean_s", "time_per_iter_s"),
        samples_at="samples_s",
        ci_at="ci95_s",
    )
    fields = HaloFields
    workload = "a 3-D 7-point stencil on a global grid split over the ranks, halos exchanged each iteration"
    communicates_always = "mpi"

    def figures(self, fields: ResultSchema) -> list[Figure]:
        """Time per iteration from its samples (lower is better), and the communication share as stored."""
        found = [
            robust_figure(self.metric, self.metric.name, finite_samples(at(fields, "samples_s")), self.value(fields)),
            stored_figure("comm_fraction", fields.comm_fraction, "share", False, 0.25),
        ]
        return [f for f in found if f is not None]

    def bounds(self, fields: ResultSchema) -> list[Bound]:
        found = [
            Bound(f"samples_s[{i}]", v, SMALLEST, MAX_SECONDS) for i, v in enumerate(listed(at(fields, "samples_s")))
        ]
        for name, low, high in (
            ("time_per_iter_s", SMALLEST, MAX_SECONDS),
            ("time_per_iter_mean_s", SMALLEST, MAX_SECONDS),
            ("comm_fraction", 0.0, 1.0),
        ):
            if (value := at(fields, name)) is not None:
                found.append(Bound(name, value, low, high))
        return found

    def disagreements(self, fields: ResultSchema) -> list[str]:
        """bench.halo's time per iteration is its samples' median, its mean their mean."""
        samples = finite_samples(at(fields, "samples_s"))
        found: list[str] = []
        for name, again in (("time_per_iter_s", statistics.median), ("time_per_iter_mean_s", statistics.fmean)):
            if samples is not None and at(fields, name) is not None:
                found += disagreement(name, at(fields, name), again(samples))
        return found

    def bench_args(self, spec: Spec) -> list[str]:
        return ["--grid", str(spec.grid), "--warmup", str(spec.warmup), "--iters", str(spec.iters)]

    def label_parts(self, spec: Spec) -> tuple[str, ...]:
        return (self.name, f"g{spec.grid}")

    def validate(self, spec: Spec) -> None:
        if spec.grid < 2:
            raise UsageError(f"--grid must be >= 2, got {spec.grid}", fields=("grid",))
        if spec.ranks < 1 or spec.iters < 1 or spec.warmup < 0:
            raise UsageError("--ranks and --iters must be >= 1, --warmup >= 0", fields=("ranks", "iters", "warmup"))

    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        ranks, problems = by_rank(records, self.name, world_size)
        if not ranks:
            return {}, problems
        first = ranks[min(ranks)]
        if not first["correct"]:
            problems.append(
                f"halo checksum {first['checksum']:#x} differs from the 1-rank run's {first['reference_checksum']:#x}"
            )
        metrics = {
            key: first[key]
            for key in (
                "grid",
                "dims",
                "steps",
                "time_per_iter_s",
                "time_per_iter_mean_s",
                "ci95_s",
                "comm_fraction",
                "checksum",
                "reference_checksum",
                "value_sum",
                "correct",
                "versions",
            )
        }
        metrics["samples_s"] = first["samples_s"]
        metrics["checksum_hex"] = f"{first['checksum']:#018x}"
        metrics["hosts"] = sorted({r["host"] for r in ranks.values()})
        return metrics, problems

    def subject(self, fields: ResultSchema) -> str:
        grid = getattr(fields, "grid", None) or getattr(fields.spec, "grid", None)
        return f"halo{f' {grid}^3' if grid else ''}"

    def table(self, fields: ResultSchema) -> Table:
        from rich.table import Table  # drawn only: reading a result needs no rich

        out = Table(title=f"Halo exchange ({getattr(fields, 'grid', None)}^3, {fields.world_size} ranks)")
        for column in ("ms/iter", "comm share", "checksum", "status"):
            out.add_column(column)
        per_iter = getattr(fields, "time_per_iter_s", None)
        out.add_row(
            fmt(per_iter and per_iter * 1e3, ".3f"),
            fmt(fields.comm_fraction, ".0%"),
            getattr(fields, "checksum_hex", None) or "-",
            status_cell(fields),
        )
        return out

    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        return None  # no bandwidth figure: a stencil's time is not judged against the line rate


KIND = Halo()
