"""What a benchmark kind is: the plug-in every kind module (launch.kinds.NAME) subclasses.

A kind owns everything that differs between kinds: the bench program its ranks run and that
program's arguments, what its run ids are named by, the RunSpec fields it does not read and the
checks of those it does, how its rank records become result fields and their typed model, what
workload it is (one line), its figures: the figure of merit (the declared `Metric`: name, unit,
direction, where its CI is read, the tolerance compare allows), the figures compare sets side by
side (`figures`, recomputed from the samples), the ranges a foreign value may hold (`bounds`),
the stored figures its samples do not give (`disagreements`); what ran and how it communicated
as series names show it, its one-run table, its per-size curve, its plots' titles and its
plausibility rule. The rest of the bundle asks the registry (launch.kinds) and loops over it;
no reader names a kind's field.

A kind module imports nothing that imports the registry (tests/test_architecture.py): it sits
below every reader of results.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Protocol

from launch.schema import ResultSchema, at, number

if TYPE_CHECKING:
    from rich.table import Table


class Spec(Protocol):
    """What a kind reads of a run's spec: launch.ranks.runspec.RunSpec is one (mypy checks it
    wherever RunSpec hands itself to its kind). A kind depends on these fields, not on RunSpec,
    so launch.ranks (which asks the kinds) and the kinds import nothing of each other's room.
    A field a kind comes to read is added here."""

    @property
    def framework(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def ranks(self) -> int: ...
    @property
    def batch_size(self) -> int | None: ...
    @property
    def image_size(self) -> int | None: ...
    @property
    def effective_image_size(self) -> int: ...
    @property
    def warmup(self) -> int: ...
    @property
    def iters(self) -> int: ...
    @property
    def batches_per_iter(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def controller(self) -> str: ...
    @property
    def fp16_allreduce(self) -> bool: ...
    @property
    def fusion_threshold_mb(self) -> float | None: ...
    @property
    def cycle_time_ms(self) -> float | None: ...
    @property
    def bucket_cap_mb(self) -> float | None: ...
    @property
    def tf32(self) -> str: ...
    @property
    def memory_format(self) -> str | None: ...
    @property
    def cudnn_benchmark(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def allreduce(self) -> str | None: ...
    @property
    def backend(self) -> str: ...
    @property
    def min_bytes(self) -> int: ...
    @property
    def max_bytes(self) -> int | None: ...
    @property
    def max_seconds_per_size(self) -> float | None: ...
    @property
    def grid(self) -> int: ...


# RunSpec fields that only a training workload reads
TRAINING_FIELDS = (
    "framework",
    "engine",
    "model",
    "batch_size",
    "image_size",
    "precision",
    "controller",
    "fp16_allreduce",
    "fusion_threshold_mb",
    "cycle_time_ms",
    "bucket_cap_mb",
    "batches_per_iter",
    "tf32",
    "memory_format",
    "cudnn_benchmark",
)

# What a sample or figure read from a result can be (launch.shapes.sample, from launch.analysis.compare):
# above zero (nothing is measured at a rate or in a time of 0) and below what no machine does
SMALLEST = 1e-9
MAX_SECONDS = 86400.0  # one iteration or step of a day
AGREE = 1e-6  # relative: a stored figure this close to its recomputation agrees with it


@dataclass(frozen=True)
class Metric:
    """A kind's figure of merit: what its points are compared by (launch.analysis.aggregate), found
    at the declared paths of its typed result: the first of `value_at` that holds a number, and
    every timed iteration's value at `samples_at`."""

    name: str  # field name, units in it
    label: str  # what a reader is told
    unit: str
    higher_is_better: bool
    value_at: tuple[str, ...]
    samples_at: Optional[str] = None
    ci_at: Optional[str] = None  # the stored 95 % CI half-width of the value, over the run's iterations
    tolerance: float = 0.10  # compare: the relative change in the worse direction still within

    def value(self, fields: ResultSchema) -> Optional[float]:
        """The run's figure (its mean over iterations), or None."""
        for path in self.value_at:
            found = number(at(fields, path))
            if found is not None:
                return found
        return None

    def samples(self, fields: ResultSchema) -> list[float]:
        """Every timed iteration's figure (the run's value alone where none are stored); positive only."""
        raw = at(fields, self.samples_at) if self.samples_at else None
        found = [s for s in (number(v) for v in raw or []) if s is not None and s > 0] if isinstance(raw, list) else []
        if found:
            return found
        value = self.value(fields)
        return [value] if value is not None and value > 0 else []

    def ci95(self, fields: ResultSchema) -> Optional[float]:
        """The run's stored 95 % CI half-width over its iterations; None where it holds none (or an
        infinite one: one sample)."""
        return number(at(fields, self.ci_at)) if self.ci_at else None

    def paths(self) -> tuple[str, ...]:
        return self.value_at + tuple(p for p in (self.samples_at, self.ci_at) if p)


@dataclass(frozen=True)
class Figure:
    """One figure compare sets against its partner's (launch.analysis.compare): its value and 95 % CI
    half-width (None: no interval) recomputed from the run's own samples where it has them, its
    unit, which direction is better and the relative change in the worse direction compare allows."""

    name: str  # 'total_img_per_s', 'busbw_gbit_s@8388608'
    value: float
    ci95: Optional[float]
    unit: str
    higher_is_better: bool
    tolerance: float


@dataclass(frozen=True)
class Bound:
    """A value a reader takes from a result (perhaps another site's), named as a user finds it in the
    file ('samples.total_img_per_s[0]'), and the range it can plausibly hold (launch.shapes.sample)."""

    field: str
    value: object
    low: float
    high: float


def listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def finite_samples(values: object) -> Optional[list[float]]:
    """A non-empty list of finite numbers, or None: samples from a file are checked before use."""
    numbers = [number(v) for v in listed(values)]
    return [v for v in numbers if v is not None] if numbers and None not in numbers else None


def robust_figure(metric: Metric, name: str, samples: Optional[list[float]], stored: object) -> Optional[Figure]:
    """`metric`'s figure from its samples (bench.stats.robust: an interval a few wild samples cannot
    widen), else the stored value without an interval; None where neither is a number."""
    from bench.stats import robust

    if samples:
        found = robust(samples)
        return Figure(name, found.value, found.ci95, metric.unit, metric.higher_is_better, metric.tolerance)
    value = number(stored)
    return None if value is None else Figure(name, value, None, metric.unit, metric.higher_is_better, metric.tolerance)


def stored_figure(name: str, stored: object, unit: str, higher_is_better: bool, tolerance: float) -> Optional[Figure]:
    """A figure taken as stored (a share or a time with no samples of its own), without an interval."""
    value = number(stored)
    return None if value is None else Figure(name, value, None, unit, higher_is_better, tolerance)


def disagreement(
    name: str, stored: object, again: Optional[float], relative: float = AGREE, words: str = "samples"
) -> list[str]:
    """'NAME STORED is not what its samples give (AGAIN)', where the stored figure is not its
    recomputation within `relative`; [] where it is, or nothing was recomputed."""
    as_stored = number(stored)
    if again is None or (as_stored is not None and abs(as_stored - again) <= relative * abs(again)):
        return []
    return [f"{name} {stored!r} is not what its {words} give ({again:.6g})"]


def finite_or_none(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Judged:
    """What a kind's plausibility rule measured (launch.results.plausibility judges it against the
    line rate): in words, the bus bandwidth it implies, and more fields for the verdict."""

    measure: str
    busbw_gbit_s: Optional[float]
    upper_bound: bool = False  # overlap may hide communication: a high figure proves nothing good
    more: Optional[Mapping[str, object]] = None


class Kind(ABC):
    """One benchmark kind. Subclasses declare the attributes and implement the methods; the
    registry refuses a kind that leaves any out (launch.kinds.check)."""

    name: str
    summary: str
    programs: Mapping[str, str]  # framework -> the bench module every rank runs
    # RunSpec fields it does not read: where an experiment's [matrix] varies `benchmark`, they are
    # reset to RunSpec's defaults for it and the duplicates this makes are dropped (launch.plan.experiment)
    not_read: tuple[str, ...]
    metric: Metric  # what its points are compared by (launch.analysis.aggregate)
    fields: type[ResultSchema]  # its result's typed model: the shared fields and its own
    workload: str  # what the measured work is, in one line (tables, `fabric-bench compare`)
    trains: bool = False  # a training workload: engines, models, img/s, placement, efficiency
    # what its ranks communicate through, as series names and verdicts show it: the RunSpec/result
    # field that says so (train: the engine, allreduce: the backend), or a kind with one way only
    communicates_by: Optional[str] = None
    communicates_always: str = "-"
    # the field whose presence names this kind in results from before `benchmark` was written
    identified_by: Optional[str] = None
    # its results' per-size rows (`sizes`) as the report draws them: the figure's title; None: no rows
    sizes_plot: Optional[str] = None
    fits_alpha_beta: bool = False  # its rows fit the ring allreduce alpha-beta model (launch.predict.model)
    plausibility_rule: str  # what `plausibility` judges, in words (docs/reference/kinds.md)
    options: Mapping[str, str] = {}  # RunSpec field -> its help for this kind (the fields only some kinds read)

    @abstractmethod
    def bench_args(self, spec: Spec) -> list[str]:
        """The bench program's own arguments (the part after `python -m bench.X`)."""

    @abstractmethod
    def label_parts(self, spec: Spec) -> tuple[str, ...]:
        """What a run id names besides the ranks."""

    @abstractmethod
    def validate(self, spec: Spec) -> None:
        """The checks of the RunSpec fields it reads (launch.errors.UsageError, one line each)."""

    @abstractmethod
    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        """Its rank records -> (result fields, problems that fail the run)."""

    @abstractmethod
    def subject(self, fields: ResultSchema) -> str:
        """What ran, as series names show it: the model, or the communication benchmark."""

    @abstractmethod
    def table(self, fields: ResultSchema) -> Table:
        """One run's table (`fabric-bench run` prints it)."""

    @abstractmethod
    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        """What its plausibility verdict judges; None: no verdict applies to this kind."""

    def gpu_engine(self, fields: ResultSchema) -> Optional[str]:
        """The engine whose library moved a GPU run's buffers (launch.results.transport):
        ddp | horovod | native | mpi; None where it does not say."""
        return fields.engine

    def own_bytes(self, fields: ResultSchema, ranks: int, per_node: int) -> Optional[tuple[float, str]]:
        """Payload bytes its `per_node` ranks (of `ranks`) on one node sent + received in the run,
        and how that was reckoned (launch.disturbance.judge adds the protocols' overhead); None
        where it does not know."""
        return None

    def busbw_factor(self, ranks: int) -> Optional[float]:
        """nccl-tests' bus bandwidth factor of its collective (busbw = algbw x factor); None: no rows."""
        return None

    def value(self, fields: ResultSchema) -> Optional[float]:
        return self.metric.value(fields)

    def samples(self, fields: ResultSchema) -> list[float]:
        return self.metric.samples(fields)

    def ci95(self, fields: ResultSchema) -> Optional[float]:
        """The stored 95 % CI half-width of its figure of merit over the run's iterations, or None."""
        return self.metric.ci95(fields)

    def figures(self, fields: ResultSchema) -> list[Figure]:
        """What `fabric-bench compare` sets against the partner run (matched by name): by default its
        figure of merit, recomputed from its samples (never the stored mean and interval)."""
        found = robust_figure(
            self.metric,
            self.metric.name,
            finite_samples(at(fields, self.metric.samples_at)) if self.metric.samples_at else None,
            self.metric.value(fields),
        )
        return [found] if found is not None else []

    def bounds(self, fields: ResultSchema) -> list[Bound]:
        """Every sample and figure `figures` reads, with the range it can plausibly hold: by default
        the figure of merit's samples and value above zero and below a day in seconds (a kind whose
        figure is a rate says its own ceiling)."""
        high = MAX_SECONDS if self.metric.unit == "s" else math.inf
        found = [
            Bound(f"{self.metric.samples_at}[{i}]", v, SMALLEST, high)
            for i, v in enumerate(listed(at(fields, self.metric.samples_at) if self.metric.samples_at else None))
        ]
        stored = [(p, at(fields, p)) for p in self.metric.value_at]
        return found + [Bound(p, v, SMALLEST, high) for p, v in stored if isinstance(v, (int, float))]

    def disagreements(self, fields: ResultSchema) -> list[str]:
        """Stored figures that the run's own samples do not give (a result edited after it was
        written), one line each; [] where it stores nothing its samples can check."""
        return []

    def measured_at(self, fields: ResultSchema) -> tuple:
        """What defines its runs' work beyond the RunSpec's workload fields (a sweep: its message
        sizes): runs pair in `compare` only where this is equal too."""
        return ()

    def curve(self, fields: ResultSchema) -> list[tuple[float, float]]:
        """Its per-size plot's points (x: bytes, y: its figure), for kinds with `sizes_plot`."""
        return []

    def communicates(self, fields: ResultSchema) -> str:
        """How its ranks communicated, as series names show it (`communicates_by`): the engine, the
        backend, or the one way it has."""
        if self.communicates_by is None:
            return self.communicates_always
        found = getattr(fields, self.communicates_by, None) or getattr(fields.spec, self.communicates_by, None)
        return str(found) if found else self.communicates_always


def by_rank(records: list[dict], kind: str, world_size: int) -> tuple[dict[int, dict], list[str]]:
    """The records of `kind` by rank, and a problem naming the ranks that wrote none."""
    found = {r["rank"]: r for r in records if r["kind"] == kind}
    missing = sorted(set(range(world_size)) - set(found))
    return found, [f"ranks {missing} wrote no {kind} record"] if missing else []


def status_cell(fields: ResultSchema) -> str:
    return str(fields.status) if fields.status == "ok" else f"{fields.status}: {fields.reason}"


def fmt(value: object, spec: str) -> str:
    return "-" if value is None else format(value, spec)
