"""What a benchmark kind is: the plug-in every kind module (launch.kinds.NAME) subclasses.

A kind owns everything that differs between kinds: the bench program its ranks run and that
program's arguments, what its run ids are named by, the RunSpec fields it does not read and the
checks of those it does, how its rank records become result fields and their typed model, its
figure of merit (found through the declared `Metric`, never by the kind's name), what ran and
how it communicated as series names show it, its one-run table, its plots' titles and its
plausibility rule. The rest of the bundle asks the registry (launch.kinds) and loops over it.

A kind module imports nothing that imports the registry (tests/test_architecture.py): it sits
below every reader of results.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

from launch.results.schema import ResultSchema, at, number

if TYPE_CHECKING:
    from rich.table import Table

    from launch.ranks.runspec import RunSpec

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


@dataclass(frozen=True)
class Metric:
    """A kind's figure of merit: what its points are compared by (launch.results.aggregate), found
    at the declared paths of its typed result: the first of `value_at` that holds a number, and
    every timed iteration's value at `samples_at`."""

    name: str  # field name, units in it
    label: str  # what a reader is told
    unit: str
    higher_is_better: bool
    value_at: tuple[str, ...]
    samples_at: Optional[str] = None

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

    def paths(self) -> tuple[str, ...]:
        return self.value_at + ((self.samples_at,) if self.samples_at else ())


@dataclass(frozen=True)
class Judged:
    """What a kind's plausibility rule measured (launch.results.plausibility judges it against the
    line rate): in words, the bus bandwidth it implies, and more fields for the verdict."""

    measure: str
    busbw_gbit_s: Optional[float]
    upper_bound: bool = False  # overlap may hide communication: a high figure proves nothing good
    more: Optional[Mapping[str, Any]] = None


class Kind(ABC):
    """One benchmark kind. Subclasses declare the attributes and implement the methods; the
    registry refuses a kind that leaves any out (launch.kinds.check)."""

    name: str
    summary: str
    programs: Mapping[str, str]  # framework -> the bench module every rank runs
    # RunSpec fields it does not read: where an experiment's [matrix] varies `benchmark`, they are
    # reset to RunSpec's defaults for it and the duplicates this makes are dropped (launch.runs.experiment)
    not_read: tuple[str, ...]
    metric: Metric  # what its points are compared by (launch.results.aggregate)
    fields: type[ResultSchema]  # its result's typed model: the shared fields and its own
    trains: bool = False  # a training workload: engines, models, img/s, placement, efficiency
    # what its ranks communicate through, as series names and verdicts show it: the RunSpec/result
    # field that says so (train: the engine, allreduce: the backend), or a kind with one way only
    communicates_by: Optional[str] = None
    communicates_always: str = "-"
    # the field whose presence names this kind in results from before `benchmark` was written
    identified_by: Optional[str] = None
    # its results' per-size rows (`sizes`) as the report draws them: the figure's title; None: no rows
    sizes_plot: Optional[str] = None
    fits_alpha_beta: bool = False  # its rows fit the ring allreduce alpha-beta model (launch.results.model)
    plausibility_rule: str  # what `plausibility` judges, in words (docs/reference/kinds.md)
    options: Mapping[str, str] = {}  # RunSpec field -> its help for this kind (the fields only some kinds read)

    @abstractmethod
    def bench_args(self, spec: "RunSpec") -> list[str]:
        """The bench program's own arguments (the part after `python -m bench.X`)."""

    @abstractmethod
    def label_parts(self, spec: "RunSpec") -> tuple[str, ...]:
        """What a run id names besides the ranks."""

    @abstractmethod
    def validate(self, spec: "RunSpec") -> None:
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


def by_rank(records: list[dict], kind: str, world_size: int) -> tuple[dict[int, dict], list[str]]:
    """The records of `kind` by rank, and a problem naming the ranks that wrote none."""
    found = {r["rank"]: r for r in records if r["kind"] == kind}
    missing = sorted(set(range(world_size)) - set(found))
    return found, [f"ranks {missing} wrote no {kind} record"] if missing else []


def status_cell(fields: ResultSchema) -> str:
    return str(fields.status) if fields.status == "ok" else f"{fields.status}: {fields.reason}"


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)
