"""Data-parallel training (bench.torch_train, bench.tf_train): img/s, its scaling and communication share."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Annotated, Optional

from bench import catalog, numerics
from bench.stats import summarize
from bench.steady_state import steady_state
from launch.errors import UsageError
from launch.kinds.kind import (
    Spec,
    MAX_SECONDS,
    SMALLEST,
    Bound,
    Figure,
    Judged,
    Kind,
    Metric,
    by_rank,
    disagreement,
    finite_or_none,
    finite_samples,
    fmt,
    listed,
    robust_figure,
    stored_figure,
)
from launch.figures import interval_text
from launch.schema import (
    AN_OBJECT,
    FiniteNumber,
    Number,
    Object,
    Open,
    RankSamples,
    ResultSchema,
    Samples,
    at,
    number,
)

if TYPE_CHECKING:
    from rich.table import Table


CONTROLLERS = ("mpi", "gloo")
MAX_IMG_PER_S_PER_RANK = 1e6  # a GPU trains a small CNN on 32 px images at ~1e4-1e5 img/s
MAX_RANKS = 10**6  # the world size the throughput's bound is scaled by, at most
COMM_SHARE_TOLERANCE = 0.25  # compare: a share of a step moves more between runs than a throughput
STRAGGLER_SHARE = 0.25  # default: 25 % slower than the median rank


def stragglers(rank_compute_samples: list[list[float]], batch_size: int, share: float = STRAGGLER_SHARE) -> dict:
    """Ranks whose exchange-free step time exceeds the median rank's by more than `share`: a
    rank's step time measured on the same step without exchange (where no rank waits for another),
    over the timed window."""
    step_s = [batch_size / statistics.mean(s) if s else None for s in rank_compute_samples]
    known = [t for t in step_s if t]
    if len(known) < 2:
        return {"share": share, "median_step_s": None, "ranks": []}
    median = statistics.median(known)
    slow = [
        {"rank": r, "step_s": t, "excess": t / median - 1.0}
        for r, t in enumerate(step_s)
        if t and t > median * (1.0 + share)
    ]
    return {"share": share, "median_step_s": median, "rank_step_s": step_s, "ranks": slow}


class Throughput(Open):
    total_img_per_s: Number = None
    ci95_img_per_s: Number = None
    per_rank_img_per_s: Number = None


class SamplesOf(Open):
    """Per-iteration samples: the run's total img/s, and per rank (a list per rank)."""

    total_img_per_s: Optional[Samples] = None
    rank_img_per_s: Optional[RankSamples] = None
    rank_compute_img_per_s: Optional[RankSamples] = None


class TrainFields(ResultSchema):
    step_time_s: FiniteNumber = None
    compute_img_per_s: FiniteNumber = None
    gradient_bytes: FiniteNumber = None  # per step, as exchanged (the wire dtype's size: numerics)
    params_max_abs_diff: FiniteNumber = None
    throughput: Annotated[Optional[Throughput], AN_OBJECT] = None
    samples: Annotated[Optional[SamplesOf], AN_OBJECT] = None
    engine_info: Object = None
    numerics: Object = None  # bench.numerics: precision, TF32, wire dtype
    wire: Object = None  # bench.numerics.wire: what went on the wire (dtype, bytes, buckets/fusion)


KIND_METRIC = Metric(
    "total_img_per_s",
    "throughput",
    "img/s",
    True,
    value_at=("throughput.total_img_per_s",),
    samples_at="samples.total_img_per_s",
    ci_at="throughput.ci95_img_per_s",
)


def total_samples(fields: ResultSchema) -> Optional[list[float]]:
    """Every timed iteration's total img/s, checked finite; None where the run stores none."""
    return finite_samples(at(fields, "samples.total_img_per_s"))


def steady_cut_recomputed(fields: ResultSchema) -> Optional[int]:
    """The warm-up cut its samples give (bench.steady_state), for a result that records one; None
    where it records none (from before the rule) or carries no samples."""
    samples = total_samples(fields)
    if samples is None or fields.steady_state is None:
        return None
    return steady_state(samples).warmup_steps_cut


def throughput_recomputed(fields: ResultSchema) -> Optional[tuple[float, Optional[float]]]:
    """(mean, 95 % CI half-width) of total img/s from the run's own samples, the warm-up its samples
    give cut; None where it carries none. The stored figures, the recorded cut included, are never
    trusted for this."""
    samples = total_samples(fields)
    if samples is None:
        return None
    summary = summarize(samples[steady_cut_recomputed(fields) or 0 :])
    return summary.mean, finite_or_none(summary.ci95)


def elementwise_sum(rows: list[list[float]]) -> list[float]:
    n = min(len(r) for r in rows)
    return [sum(r[i] for r in rows) for i in range(n)]


def training_busbw(fields: ResultSchema) -> Optional[float]:
    """Bus bandwidth implied by a training run's exposed communication (an upper bound: overlap hides some)."""
    n = fields.world_size or 0
    grad, throughput = number(at(fields, "gradient_bytes")), number(at(fields, "throughput.total_img_per_s"))
    compute, batch = number(at(fields, "compute_img_per_s")), number(at(fields, "spec.batch_size"))
    if n < 2 or not grad or not throughput or not compute or not batch:
        return None
    step_s, compute_s = batch * n / throughput, batch * n / compute
    exposed = step_s - compute_s
    if exposed <= 0:
        return None  # fully hidden: nothing to say about the link
    return grad * 8 / 1e9 * 2 * (n - 1) / n / exposed


COLUMNS = (
    "framework",
    "engine",
    "model",
    "ranks",
    "img/s total",
    "img/s per rank",
    "95% CI",
    "scaling eff.",
    "comm share",
    "params |diff|",
    "disturbance",
    "status",
)
LEFT = ("framework", "engine", "model", "status", "disturbance")


def training_table(title: str = "Training throughput") -> Table:
    """The training table's columns: one row per run (`training_row`)."""
    from rich.table import Table  # drawn only: reading a result needs no rich

    out = Table(title=title)
    for column in COLUMNS:
        out.add_column(column, justify="left" if column in LEFT else "right")
    return out


def training_row(fields: ResultSchema, efficiency: str) -> list[str]:
    """A training run's cells; its scaling efficiency as the caller knows it (against its sweep's
    baseline, launch.analysis.aggregate)."""
    ranks = fields.world_size or 0
    disturbance = fields.disturbance.summary() if fields.disturbance else "not recorded"
    return [
        str(fields.framework),
        str(fields.engine),
        str(fields.model),
        str(ranks),
        fmt(at(fields, "throughput.total_img_per_s"), ".1f"),
        fmt(at(fields, "throughput.per_rank_img_per_s"), ".1f"),
        interval_text(  # one run's, over its iterations: the cell says so
            number(at(fields, "throughput.ci95_img_per_s")), "img/s", 1, len(KIND_METRIC.samples(fields))
        ),
        efficiency,
        fmt(fields.comm_fraction if ranks > 1 else None, ".0%"),
        fmt(at(fields, "params_max_abs_diff"), ".2g"),
        f"[yellow]{disturbance}[/yellow]" if disturbance.startswith("disturbed") else disturbance,
        str(fields.status) if fields.status == "ok" else f"[red]{fields.status}[/red]: {fields.reason}",
    ]


class Train(Kind):
    name = "train"
    summary = "data-parallel training"
    programs = {"torch": "bench.torch_train", "tf": "bench.tf_train"}
    not_read = ("grid", "backend", "min_bytes", "max_bytes", "max_seconds_per_size")
    plausibility_rule = "the bus bandwidth its exposed communication implies, against the line rate (an upper bound: overlap hides some)"
    metric = KIND_METRIC
    fields = TrainFields
    workload = "data-parallel training of an image model on synthetic data: images per second, all ranks together"
    trains = True
    communicates_by = "engine"
    identified_by = "throughput"

    def figures(self, fields: ResultSchema) -> list[Figure]:
        """Total and per-rank img/s from the samples (the warm-up they give cut), the communication
        share and the step time as stored (lower is better for both)."""
        ranks = max(1, fields.world_size or 1)
        samples = total_samples(fields)
        cut = steady_cut_recomputed(fields) or 0
        total = robust_figure(
            self.metric, "total_img_per_s", samples[cut:] if samples else None, at(fields, "throughput.total_img_per_s")
        )
        found: list[Figure] = []
        if total is not None:
            per_rank = total.ci95 / ranks if total.ci95 is not None else None
            found += [
                total,
                Figure("per_rank_img_per_s", total.value / ranks, per_rank, "img/s", True, total.tolerance),
            ]
        for figure in (
            stored_figure("comm_fraction", fields.comm_fraction, "share", False, COMM_SHARE_TOLERANCE),
            stored_figure("step_time_s", at(fields, "step_time_s"), "s", False, self.metric.tolerance),
        ):
            if figure is not None:
                found.append(figure)
        return found

    def bounds(self, fields: ResultSchema) -> list[Bound]:
        most = MAX_IMG_PER_S_PER_RANK * min(max(1, fields.world_size or 1), MAX_RANKS)
        found = [
            Bound(f"samples.total_img_per_s[{i}]", v, SMALLEST, most)
            for i, v in enumerate(listed(at(fields, "samples.total_img_per_s")))
        ]
        for name, low, high in (
            ("throughput.total_img_per_s", SMALLEST, most),
            ("comm_fraction", 0.0, 1.0),
            ("step_time_s", SMALLEST, MAX_SECONDS),
        ):
            if (value := at(fields, name)) is not None:
                found.append(Bound(name, value, low, high))
        return found

    def disagreements(self, fields: ResultSchema) -> list[str]:
        """The recorded warm-up cut, total img/s and its interval against what the samples give."""
        found: list[str] = []
        cut = steady_cut_recomputed(fields)
        stored_cut = fields.steady_state.warmup_steps_cut if fields.steady_state is not None else None
        if cut is not None and cut != (stored_cut or 0):
            found.append(f"steady_state.warmup_steps_cut {stored_cut!r} is not what its samples give ({cut})")
        again = throughput_recomputed(fields)
        if again is not None:
            for name, value in (("total_img_per_s", again[0]), ("ci95_img_per_s", again[1])):
                found += disagreement(f"throughput.{name}", at(fields, f"throughput.{name}"), value)
        return found

    def bench_args(self, spec: Spec) -> list[str]:
        args = [
            "--engine",
            spec.engine,
            "--model",
            spec.model,
            "--batch-size",
            str(spec.batch_size),
            "--image-size",
            str(spec.effective_image_size),
            "--warmup",
            str(spec.warmup),
            "--iters",
            str(spec.iters),
            "--batches-per-iter",
            str(spec.batches_per_iter),
            "--precision",
            spec.precision,
            "--seed",
            str(spec.seed),
            "--tf32",
            spec.tf32,
            "--cudnn-benchmark",
            spec.cudnn_benchmark,
        ]
        if spec.fp16_allreduce:
            args.append("--fp16-allreduce")
        if spec.engine == "ddp" and spec.allreduce:
            args += ["--backend", spec.allreduce]
        optional = {
            "--fusion-threshold-mb": spec.fusion_threshold_mb,
            "--cycle-time-ms": spec.cycle_time_ms,
            "--bucket-cap-mb": spec.bucket_cap_mb,
            "--memory-format": spec.memory_format,
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value)]
        return args

    def label_parts(self, spec: Spec) -> tuple[str, ...]:
        return (spec.framework, spec.engine, spec.model)

    def validate(self, spec: Spec) -> None:
        if spec.framework not in catalog.ENGINES:
            raise UsageError(
                f"unknown framework {spec.framework!r}; choose from {', '.join(catalog.ENGINES)}", fields=("framework",)
            )
        engines = catalog.ENGINES[spec.framework]
        if spec.engine not in engines:
            raise UsageError(
                f"unknown engine {spec.engine!r} for {spec.framework}; choose from {', '.join(engines)}",
                fields=("engine", "framework"),
            )
        models = catalog.MODELS[spec.framework]
        if spec.model not in models:
            raise UsageError(
                f"unknown model {spec.model!r} for {spec.framework}; choose from {', '.join(models)}",
                fields=("model", "framework"),
            )
        precisions = catalog.PRECISIONS[spec.framework]
        if spec.precision not in precisions:
            raise UsageError(
                f"unknown precision {spec.precision!r}; choose from {', '.join(precisions)}", fields=("precision",)
            )
        if spec.controller not in CONTROLLERS:
            raise UsageError(
                f"unknown controller {spec.controller!r}; choose from {', '.join(CONTROLLERS)}", fields=("controller",)
            )
        for name in ("ranks", "batch_size", "iters", "batches_per_iter"):
            if getattr(spec, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(spec, name)}", fields=(name,))
        for name, allowed in (
            ("tf32", numerics.SWITCH),
            ("cudnn_benchmark", numerics.SWITCH),
            ("memory_format", (None, *numerics.MEMORY_FORMATS)),
        ):
            if getattr(spec, name) not in allowed:
                raise UsageError(
                    f"--{name.replace('_', '-')} must be one of "
                    f"{', '.join(a for a in allowed if a)}, got {getattr(spec, name)!r}",
                    fields=(name,),
                )
        if spec.bucket_cap_mb is not None and spec.engine != "ddp":
            raise UsageError("--bucket-cap-mb applies to the ddp engine only", fields=("bucket_cap_mb", "engine"))
        if spec.warmup < 0:
            raise UsageError(f"--warmup must be >= 0, got {spec.warmup}", fields=("warmup",))
        minimum = catalog.MIN_IMAGE_SIZE.get(spec.model, 32)
        if spec.image_size is not None and spec.image_size < minimum:
            raise UsageError(
                f"--image-size {spec.image_size} is too small for {spec.model} (minimum {minimum})",
                fields=("image_size", "model"),
            )

    def assemble(self, records: list[dict], world_size: int, tolerance: float) -> tuple[dict, list[str]]:
        """Throughput, communication share and parameter agreement of a training run."""
        ranks_by, problems = by_rank(records, self.name, world_size)
        if not ranks_by:
            return {}, problems
        ranks = [ranks_by[k] for k in sorted(ranks_by)]
        totals = elementwise_sum([r["samples_img_per_s"] for r in ranks])  # all ranks step together
        # the warm-up found in the steps (bench.steady_state), left out of the figures; samples kept whole
        steady = steady_state(totals)
        cut = steady.warmup_steps_cut
        compute_cut = steady_state(elementwise_sum([r["compute_samples_img_per_s"] for r in ranks])).warmup_steps_cut
        total = summarize(totals[cut:])
        rank_means = [summarize(r["samples_img_per_s"][cut:]).mean for r in ranks]
        compute_means = [summarize(r["compute_samples_img_per_s"][compute_cut:]).mean for r in ranks]
        # time share of a step not explained by the same step without gradient exchange
        shares = [1.0 - train / compute for train, compute in zip(rank_means, compute_means)]
        diff = max(r["params_max_abs_diff"] for r in ranks)
        if diff > tolerance:
            problems.append(f"parameters differ across ranks (max |diff| {diff:.3g} > {tolerance:g})")
        batch = ranks[0]["config"]["batch_size"]
        return {
            "throughput": {
                "total_img_per_s": total.mean,
                "per_rank_img_per_s": total.mean / len(ranks),
                "ci95_img_per_s": total.ci95,
                "median_total_img_per_s": total.median,
                "n_samples": total.n,
                "rank_img_per_s": rank_means,
            },
            "samples": {
                "total_img_per_s": totals,
                "rank_img_per_s": [r["samples_img_per_s"] for r in ranks],
                "rank_compute_img_per_s": [r["compute_samples_img_per_s"] for r in ranks],
            },
            "steady_state": {**steady.as_dict(), "compute_warmup_steps_cut": compute_cut},
            "compute_img_per_s": sum(compute_means),
            "comm_fraction": min(1.0, max(0.0, sum(shares) / len(shares))),
            "comm_fraction_raw": sum(shares) / len(shares),
            "params_max_abs_diff": diff,
            "params_sha256": sorted({r["params_sha256"] for r in ranks}),
            "gradient_bytes": ranks[0].get("gradient_bytes"),
            "numerics": ranks[0].get("numerics"),  # bench.numerics; None in results from before it
            "wire": ranks[0].get("wire"),  # bench.numerics.wire: dtype, bytes, buckets; None before it
            "versions": ranks[0].get("versions", {}),
            "engine_info": ranks[0].get("engine_info", {}),
            "device": ranks[0].get("device"),
            "hosts": sorted({r["host"] for r in ranks}),
            "step_time_s": batch / rank_means[0] if rank_means[0] else None,
            # ranks slower than the median on the step without exchange (launch.ranks.heartbeat)
            "stragglers": stragglers([r["compute_samples_img_per_s"] for r in ranks], batch),
        }, problems

    def subject(self, fields: ResultSchema) -> str:
        return fields.model or self.name

    def table(self, fields: ResultSchema) -> Table:
        """The run alone (`fabric-bench run`): a 1-rank run's efficiency is 1, a multi-rank run's
        unknown without its sweep's baseline (launch.analysis.table.training_table has them)."""
        out = training_table()
        out.add_row(*training_row(fields, fmt(1.0 if fields.world_size == 1 else None, ".2f")))
        return out

    def plausibility(self, fields: ResultSchema) -> Optional[Judged]:
        return Judged(
            "training: busbw implied by exposed communication (upper bound)", training_busbw(fields), upper_bound=True
        )

    def own_bytes(self, fields: ResultSchema, ranks: int, per_node: int) -> Optional[tuple[float, str]]:
        gradient = number(at(fields, "gradient_bytes"))
        if gradient is None:
            return None
        factor = 2 * (ranks - 1) / ranks  # ring allreduce: each rank sends and receives this x the payload
        # the timed steps (the window's) and the parameter check after them (bench.train_record)
        steps = int((number(at(fields, "spec.iters")) or 0) * (number(at(fields, "spec.batches_per_iter")) or 1) + 2)
        return gradient * steps * factor * per_node * 2, f"gradient bytes x {steps} steps x {factor:g} (ring) x 2 ways"


KIND = Train()
