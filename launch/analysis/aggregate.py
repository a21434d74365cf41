"""One aggregation of results into points, one baseline rule.

Everything that shows a number per configuration (the report, the sweep
summary and its tables, `fabric-bench run`'s table) reads it from here, so
they cannot disagree:

- A *point* is every ok run of one configuration (benchmark, model, fabric,
  engine, allreduce, gpudirect, nodes, ranks, sizes): its repetitions. Its
  value is the mean of the repetitions' means; its 95 % CI comes from the
  repetitions AND the iterations (`mean_ci`); the runs stay listed.
- A *series* is the points of one configuration at every rank count (a curve).
- The 1-rank *baseline* of a series is its own 1-rank point if it has one,
  else the fabric-less 1-rank point a sweep adds (one node, one rank, nothing
  crosses a network) of the same benchmark, engine, model and sizes: that one
  baseline joins every fabric series of its group.
- Scaling efficiency = throughput(N) / (N x throughput(1 rank) per rank) with
  that baseline; a 1-rank point has efficiency 1 by definition.
- Communication share: the mean of the runs' `comm_fraction`; a 1-rank point
  has none (nothing is communicated; what the field holds there is noise).
- A run whose disturbance record says `disturbed` (launch.disturbance: an outside cause) is
  left out of its point, which names it (`left_out`); where every run of a configuration was
  disturbed, the point is kept so readers can name it, marked `disturbed`, and nothing
  built on it (efficiency, a verdict) is read as clean. `keep_disturbed` keeps them in.
  A run that is only `unsteady` (its own steps varied) stays in, its spread widening the
  CI, and the point names it (`unsteady`).
- A run's samples are its steady ones: the warm-up its result cut (`steady_state`,
  bench.steady_state) is left out here as in its own figures.

Fields a result lacks leave it out; they never fail an aggregation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from launch.kinds import KINDS, kind_of, trains
from launch.kinds.kind import Metric
from launch.results.result import (
    Result,
    Spec,
    as_result,
    disturbance_causes,
    disturbed,
    field_of,
    number,
    scaling_efficiency,
    steady_cut,
    typed,
    unsteady,
)

CI_METHOD = (
    "95 % CI of the mean over repetitions and iterations: Student t with the larger of the "
    "within-run variance (iteration samples around their run's mean, / all samples) and the "
    "between-run variance (run means around the point's mean, / repetitions)"
)


METRICS = {name: k.metric for name, k in KINDS.items()}  # each kind's figure (launch.kinds)


def benchmark_of(result: Result) -> str | None:
    """The result's kind (launch.kinds.kind_of), by name; None: no kind this bundle knows."""
    found = kind_of(result)
    return found.name if found is not None else None


def run_value(result: Result) -> float | None:
    """The run's figure of merit (its mean over iterations), found through its kind's declared metric."""
    found, fields = kind_of(result), typed(result)
    return found.value(fields) if found is not None and fields is not None else None


def run_samples(result: Result) -> list[float]:
    """Every steady timed iteration's value of the metric: the warm-up its result cut left out (the
    run's value alone if no samples are stored)."""
    found, fields = kind_of(result), typed(result)
    samples = found.samples(fields) if found is not None and fields is not None else []
    return samples[min(steady_cut(result), max(0, len(samples) - 1)) :]


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % CI half-width and the variance and degrees of freedom it came from."""

    mean: float
    variance: float | None  # of the mean; None: not estimable (one sample)
    df: float | None

    @property
    def ci95(self) -> float | None:
        if self.variance is None or not self.df:
            return None
        from scipy import stats as scipy_stats  # here, not at import: ~0.8 CPU-s every CLI start paid

        return float(scipy_stats.t.ppf(0.975, self.df)) * math.sqrt(self.variance)


def mean_ci(runs: list[list[float]]) -> Estimate:
    """Mean of the runs' means, and its variance from repetitions and iterations (CI_METHOD)."""
    runs = [r for r in runs if r]
    means = [statistics.fmean(r) for r in runs]
    grand = statistics.fmean(means)
    n_total = sum(len(r) for r in runs)
    candidates = []
    within_df = n_total - len(runs)
    if within_df > 0:
        ss = sum((x - m) ** 2 for r, m in zip(runs, means) for x in r)
        candidates.append((ss / within_df / n_total, float(within_df)))
    if len(runs) > 1:
        candidates.append((statistics.variance(means) / len(runs), float(len(runs) - 1)))
    if not candidates:
        return Estimate(grand, None, None)
    variance, df = max(candidates)
    return Estimate(grand, variance, df)


def spec_of(result: Result) -> Spec:
    """The RunSpec the run was made from, typed (launch.schema.Spec; made once per result)."""
    return result.spec


def fabric_label(result: Result) -> str:
    """The fabric a result ran on, as series names show it: an emulated link
    without a fabric name by its rate; '+env' when the user overrode variables."""
    spec = spec_of(result)
    rate = number(field_of(result, "link_rate_gbit_s"))
    name = spec.fabric or (f"emulated {rate:g} Gbit/s" if rate else "default")
    return name + ("+env" if spec.extra_env else "")


def what_of(result: Result) -> str:
    """How the ranks communicate: a training run's engine, an allreduce run's backend, the halo
    proxy's MPI (each kind says which: launch.kinds); a RunSpec field a kind does not read (an
    allreduce run's default engine) never names it."""
    kind = kind_of(result)
    if kind is None:
        return field_of(result, "engine") or field_of(result, "backend") or "-"
    if kind.communicates_by is None:
        return kind.communicates_always
    return (
        field_of(result, kind.communicates_by)
        or getattr(spec_of(result), kind.communicates_by, None)
        or kind.communicates_always
    )


def subject_of(result: Result) -> str:
    """What ran, as its kind names it: the model, or the communication benchmark (with its grid for
    the halo proxy)."""
    kind, fields = kind_of(result), typed(result)
    if kind is not None and fields is not None:
        return kind.subject(fields)
    return field_of(result, "model") or field_of(result, "benchmark") or "-"


# The communication knobs that split a series (the RunSpec field of each): how a series' name shows
# a value set, and what a verdict along the knob calls it (launch.analysis.verdict.AXES)
COMM_KNOBS = {
    "allreduce": ("{}", "allreduce (NCCL vs MPI)"),
    "gpudirect": ("gdr-{}", "GPUDirect"),
    "nvls": ("nvls-{}", "NVLS (NVLink SHARP)"),
    "sharp": ("sharp-{}", "SHARP (CollNet)"),
}


def knobs_of(result: Result) -> tuple[str | None, ...]:
    """The run's value of each of COMM_KNOBS, in order (None: not set)."""
    spec = spec_of(result)
    return tuple(getattr(spec, knob) for knob in COMM_KNOBS)


def series_name(result: Result) -> str:
    """fabric/engine/model, plus the knobs set (allreduce, GPUDirect, NVLS, SHARP)."""
    name = f"{fabric_label(result)}/{what_of(result)}/{subject_of(result)}"
    extras = [form.format(value) for (form, _), value in zip(COMM_KNOBS.values(), knobs_of(result)) if value]
    return name + (f" ({', '.join(extras)})" if extras else "")


def baseline_key(result: Result) -> tuple:
    """What a 1-rank baseline must share with the runs it serves (not the fabric, not the knobs)."""
    spec = spec_of(result)
    return (
        benchmark_of(result),
        field_of(result, "framework"),
        what_of(result),
        subject_of(result),
        spec.batch_size,
        spec.image_size,
        spec.precision,
    )


def ranks_of(result: Result) -> int | None:
    ranks = result.world_size or spec_of(result).ranks
    return ranks if ranks is not None and ranks >= 1 else None


def nodes_of(result: Result) -> int:
    return spec_of(result).nodes or 1


def series_key(result: Result) -> tuple:
    spec = spec_of(result)
    return (
        *baseline_key(result),
        fabric_label(result),
        *knobs_of(result),
        spec.gpus_per_node,
        spec.runtime,
        spec.image,
    )


def usable(result: Result) -> bool:
    return (
        result.status == "ok"
        and benchmark_of(result) is not None
        and ranks_of(result) is not None
        and run_value(result) is not None
    )


@dataclass
class Point:
    """Every ok repetition of one configuration."""

    series: str
    series_key: tuple
    benchmark: str
    fabric: str
    ranks: int
    nodes: int
    runs: list[Result]
    estimate: Estimate  # of the metric itself
    log_estimate: Estimate  # of log(metric): what verdicts compare
    baseline: "Point | None" = None  # the 1-rank point scaling efficiency divides by
    extras: dict = field(default_factory=dict)
    left_out: list[dict] = field(default_factory=list)  # disturbed runs not in `runs`: run_id, causes
    disturbed: bool = False  # every run of it was disturbed: its runs are those, kept to be named

    @property
    def unreadable_because(self) -> str | None:
        """Why a figure built on this point (or its baseline) cannot be read: None when it can."""
        for point, role in ((self, "the run"), (self.baseline, "the 1-rank baseline")):
            if point is not None and point.disturbed:
                named = "; ".join(f"{r.run_id}: {', '.join(disturbance_causes(r)) or 'disturbed'}" for r in point.runs)
                return f"{role} was disturbed ({named})"
        return None

    @property
    def unsteady(self) -> list[str]:
        """The run ids of its runs whose own steps were unsteady (kept: their spread is in the CI)."""
        return [r.run_id for r in self.runs if unsteady(r)]

    @property
    def metric(self) -> Metric:
        return METRICS[self.benchmark]

    @property
    def mean(self) -> float:
        return self.estimate.mean

    @property
    def ci95(self) -> float | None:
        return self.estimate.ci95

    @property
    def repetitions(self) -> int:
        return len(self.runs)

    @property
    def n_samples(self) -> int:
        return sum(len(run_samples(r)) for r in self.runs)

    @property
    def first(self) -> Result:
        return self.runs[0]

    @property
    def comm_fraction(self) -> float | None:
        """None on one rank (no communication) and where no run measured it."""
        if self.ranks == 1:
            return None
        shares = [c for c in (number(field_of(r, "comm_fraction")) for r in self.runs) if c is not None]
        return statistics.fmean(shares) if shares else None

    @property
    def efficiency(self) -> float | None:
        """Training only: throughput(N) / (N x per-rank throughput of the 1-rank baseline); 1 on one rank."""
        if not trains(self.benchmark):
            return None
        if self.ranks == 1:
            return 1.0
        if self.baseline is None:
            return None
        return scaling_efficiency(self.mean, self.ranks, self.baseline.mean, self.baseline.ranks)

    def run_efficiency(self, result: Result) -> float | None:
        """One repetition's efficiency against the same (aggregated) baseline; 1 on one rank."""
        if not trains(self.benchmark) or self.ranks == 1:
            return 1.0 if trains(self.benchmark) else None
        value = run_value(result)
        if self.baseline is None or value is None:
            return None
        return scaling_efficiency(value, self.ranks, self.baseline.mean, self.baseline.ranks)

    @property
    def shares_cores(self) -> bool:
        """CPU ranks on one host: they share the cores the 1-rank baseline had to itself."""
        spec = spec_of(self.first)
        return trains(self.benchmark) and self.nodes == 1 and self.ranks > 1 and not spec.gpus_per_node

    def same_cores_efficiency(self, result: Result) -> float | None:
        """Where ranks share the host's cores: total throughput at N ranks / at 1 rank (1.0: the
        same cores do the same work; the per-rank efficiency then reads ~1/N by construction)."""
        value = run_value(result)
        if not self.shares_cores or self.baseline is None or value is None:
            return None
        return value / self.baseline.mean

    @property
    def same_cores(self) -> float | None:
        """The point's same-cores efficiency (its mean / its 1-rank baseline's); None on one rank and
        where the ranks do not share a host's cores."""
        if not self.shares_cores or self.baseline is None:
            return None
        return self.mean / self.baseline.mean

    def describe(self) -> dict:
        """Plain data (report_data.json, summary.json)."""
        spec = spec_of(self.first)
        return {
            "series": self.series,
            "benchmark": self.benchmark,
            "fabric": self.fabric,
            "engine": what_of(self.first),
            "model": subject_of(self.first),
            "allreduce": spec.allreduce,
            "gpudirect": spec.gpudirect,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "ranks_per_node": self.ranks // self.nodes,
            "metric": self.metric.name,
            "unit": self.metric.unit,
            "mean": self.mean,
            "ci95": self.ci95,
            "repetitions": self.repetitions,
            "n_samples": self.n_samples,
            "repetition_values": [run_value(r) for r in self.runs],
            "scaling_efficiency": self.efficiency,
            "same_cores_efficiency": self.same_cores,
            "comm_fraction": self.comm_fraction,
            "baseline_runs": [r.run_id for r in self.baseline.runs] if self.baseline else None,
            "runs": [r.run_id for r in self.runs],
            "disturbed": self.disturbed,
            "left_out": self.left_out,
            "unsteady_runs": self.unsteady,
            "unreadable_because": self.unreadable_because,
        }


def _detail(result: Result) -> tuple[str, ...]:
    spec = spec_of(result)
    return (
        f"b{spec.batch_size}",
        f"{spec.image_size}px",
        str(spec.precision),
        str(spec.runtime),
        str(spec.image),
    )


def _unique_names(names: dict[tuple, str], first: dict[tuple, Result]) -> dict[tuple, str]:
    """Series names that collide (same fabric/engine/model, other sizes or image) get the difference added."""
    by_name: dict[str, list[tuple]] = {}
    for key, name in names.items():
        by_name.setdefault(name, []).append(key)
    out = dict(names)
    for name, keys in by_name.items():
        if len(keys) < 2:
            continue
        details = {key: _detail(first[key]) for key in keys}
        varying = [i for i in range(len(details[keys[0]])) if len({d[i] for d in details.values()}) > 1]
        for key in keys:
            out[key] = f"{name} [{' '.join(details[key][i] for i in varying)}]" if varying else name
    return out


def left_out_entry(result: Result) -> dict:
    return {"run_id": result.run_id, "causes": disturbance_causes(result)}


def aggregate(results: Sequence[Result], keep_disturbed: bool = False) -> list[Point]:
    """Points of every usable result, each with its 1-rank baseline joined (see the module's rule);
    disturbed runs left out of their point unless `keep_disturbed`. Each result is read through its
    typed model (launch.results.result.Result: a result read from a file is one already; a dict made
    in memory, a sweep's or a test's, is read as one here)."""
    grouped: dict[tuple, dict[int, list[Result]]] = {}
    for r in map(as_result, results):
        ranks = ranks_of(r)
        if usable(r) and ranks is not None:
            grouped.setdefault(series_key(r), {}).setdefault(ranks, []).append(r)
    first = {key: next(iter(by_ranks.values()))[0] for key, by_ranks in grouped.items()}
    names = _unique_names({key: series_name(r) for key, r in first.items()}, first)
    points = []
    for key, by_ranks in grouped.items():
        for ranks, every in sorted(by_ranks.items()):
            clean = every if keep_disturbed else [r for r in every if not disturbed(r)]
            runs = clean or every
            samples = [run_samples(r) for r in runs]
            logs = [[math.log(x) for x in s] for s in samples]
            points.append(
                Point(
                    series=names[key],
                    series_key=key,
                    benchmark=str(benchmark_of(runs[0])),
                    fabric=fabric_label(runs[0]),
                    ranks=ranks,
                    nodes=nodes_of(runs[0]),
                    runs=runs,
                    estimate=mean_ci(samples),
                    log_estimate=mean_ci(logs),
                    left_out=[left_out_entry(r) for r in every if all(r is not x for x in runs)],
                    disturbed=not clean,
                )
            )
    join_baselines(points)
    return points


def join_baselines(points: list[Point]) -> None:
    ones = [p for p in points if p.ranks == 1]
    for point in points:
        if point.ranks == 1:
            continue
        own = [p for p in ones if p.series_key == point.series_key]
        if own:
            point.baseline = own[0]
            continue
        # the fabric-less 1-rank baseline of the same benchmark/engine/model/sizes; same image first
        shared = [p for p in ones if not spec_of(p.first).fabric and baseline_key(p.first) == baseline_key(point.first)]
        shared.sort(
            key=lambda p: (
                spec_of(p.first).image != spec_of(point.first).image,
                spec_of(p.first).extra_env != spec_of(point.first).extra_env,
            )
        )
        point.baseline = shared[0] if shared else None


def curves(points: list[Point]) -> dict[str, list[Point]]:
    """The training kinds' series -> its points by rank count, each series with its (possibly
    shared) 1-rank baseline first.

    A fabric-less 1-rank point that serves other series is not a curve of its own."""
    out: dict[str, dict[int, Point]] = {}
    serving = {id(p.baseline) for p in points if p.baseline is not None}
    for p in points:
        if not trains(p.benchmark):
            continue
        if p.ranks == 1 and id(p) in serving and not any(q.series_key == p.series_key and q.ranks > 1 for q in points):
            continue  # drawn as the first point of the series it serves
        out.setdefault(p.series, {})[p.ranks] = p
        if p.baseline is not None:
            out[p.series].setdefault(1, p.baseline)
    return {name: [by_ranks[r] for r in sorted(by_ranks)] for name, by_ranks in sorted(out.items())}


def point_of(points: list[Point], result: Result) -> Point | None:
    """The point a result belongs to: the same object, else the same run_id (the result read again)."""
    for p in points:
        if any(r is result for r in p.runs):
            return p
    run_id = result.run_id
    for p in points:
        if run_id and any(as_result(r).run_id == run_id for r in p.runs):
            return p
    return None
