"""Compare results A (reference) and B (candidate), metric by metric.

B is within tolerance of A when |B - A| <= tolerance x |A|, or when the
difference is inside the runs' combined noise (sqrt(ciA^2 + ciB^2) from the
95 % CIs): a difference the measurement cannot resolve is not a regression.
Values and intervals are recomputed from each result's own samples (a result
from another site is data to check, not figures to believe); a stored figure
its samples do not give is reported (`disagreements`). Every sample and figure
read is first a finite number in its plausible range (`plausible`: no negative,
zero or impossible throughput, time or bandwidth; else the result is refused in
one line), and the interval is one that a few wild samples cannot widen
(bench.stats.robust: the mean's Student-t interval where no sample is an outlier
by the median's own scale, else the median's distribution-free interval, or none).
Runs in two directories are paired by what defines them (benchmark, engine,
model, fabric, ranks, sizes); a run without a partner is reported, not compared.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from bench.stats import robust
from launch.errors import UsageError
from launch.kinds import kind_of
from launch.ranks.runspec import RunSpec
from launch.results.result import (
    Result,
    as_result,
    field_of,
    files_under,
    malformed,
    number,
    read_tree,
    steady_cut_recomputed,
    total_samples,
    typed,
)
from launch.results.schema import at
from launch.shapes import sample, terminal

DEFAULT_TOLERANCE = {
    "total_img_per_s": 0.10,
    "per_rank_img_per_s": 0.10,
    "step_time_s": 0.10,
    "comm_fraction": 0.25,
    "busbw_gbit_s": 0.10,
}

# What a sample or figure read from a result can be (launch.shapes.sample): above zero (nothing is
# measured at a rate or in a time of 0) and below what no machine does, with room to spare
SMALLEST = 1e-9
MAX_IMG_PER_S_PER_RANK = 1e6  # a GPU trains a small CNN on 32 px images at ~1e4-1e5 img/s
MAX_RANKS = 10**6  # the world size the throughput's bound is scaled by, at most
MAX_BUSBW_GBIT_S = 1e5  # 100 Tbit/s: beyond any link, NVLink's 14.4 Tbit/s included
MAX_SECONDS = 86400.0  # one iteration or step of a day


@dataclass(frozen=True)
class Metric:
    name: str
    a: float
    b: float
    ci_a: float | None
    ci_b: float | None
    tolerance: float

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a else None

    @property
    def noise(self) -> float:
        return math.hypot(self.ci_a or 0.0, self.ci_b or 0.0)

    @property
    def within(self) -> bool:
        return abs(self.b - self.a) <= max(self.tolerance * abs(self.a), self.noise)


def load(path: Path, allowed_signers: Path | None = None, require_signed: bool = False):
    """(results, provenance) from a result.json, a directory tree of them, or an archive
    (verified, its signature checked; provenance None for the others); a file that is not a
    result is refused (a comparison that silently lost runs would mislead)."""
    path = Path(path)
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        return load_archive(path, allowed_signers, require_signed)
    if not path.exists() or not files_under([path]):
        raise UsageError(f"{path}: no result.json found")
    results, problems = read_tree([path])
    problems += [f"{r.path}: malformed: {why}" for r in results if (why := malformed(r))]
    if problems:
        raise UsageError(terminal(problems[0]))
    return [plausible(r, str(r.path)) for r in results], None


def load_archive(path: Path, allowed_signers: Path | None = None, require_signed: bool = False):
    """(results, provenance) of an archive: verified member by member, its signature checked."""
    from launch.provenance import archive as archives

    verified = archives.read(path)
    provenance = verified.provenance(allowed_signers, require_signed)
    found = verified.results()
    results = list(found.values())
    problems = [f"archive {path}: {name}: malformed: {why}" for name, r in found.items() if (why := malformed(r))]
    if problems:
        raise UsageError(terminal(problems[0]))
    if not results:
        raise UsageError(f"archive {path} holds no results")
    return [plausible(r, f"archive {path}: {name}") for name, r in found.items()], provenance


def plausible(result: Result, where: str) -> Result:
    """The result, where every sample and figure compare reads is a finite number in its plausible
    range; else one line naming the result (`where`) and the field."""
    where, fields = terminal(where), typed(result)
    most = MAX_IMG_PER_S_PER_RANK * min(max(1, result.world_size or 1), MAX_RANKS)
    for i, value in enumerate(_listed(at(fields, "samples.total_img_per_s"))):
        sample(f"{where}: samples.total_img_per_s[{i}]", value, SMALLEST, most)
    for name, low, high in (
        ("throughput.total_img_per_s", SMALLEST, most),
        ("comm_fraction", 0.0, 1.0),
        ("step_time_s", SMALLEST, MAX_SECONDS),
    ):
        if (value := at(fields, name)) is not None:
            sample(f"{where}: {name}", value, low, high)
    for r, row in enumerate(result.sizes):
        if row.get("busbw_gbit_s") is not None:
            sample(f"{where}: sizes[{r}].busbw_gbit_s", row["busbw_gbit_s"], 0.0, MAX_BUSBW_GBIT_S)
        quickest = SMALLEST  # a time below it is a busbw faster than MAX_BUSBW_GBIT_S
        if (factor := _busbw_factor(result)) and (nbytes := number(row.get("bytes"))):
            quickest = max(SMALLEST, nbytes * 8 * factor / (MAX_BUSBW_GBIT_S * 1e9) * 1e6)
        for i, value in enumerate(_listed(row.get("samples_us"))):
            sample(f"{where}: sizes[{r}].samples_us[{i}]", value, quickest, MAX_SECONDS * 1e6)
    return result


def _listed(value) -> list:
    return value if isinstance(value, list) else []


def _busbw_factor(result: Result) -> float | None:
    """nccl-tests' factor of the result's collective (its kind's: launch.kinds); None: no rows."""
    found = kind_of(result)
    return found.busbw_factor(result.world_size) if found is not None and result.world_size else None


WORKLOAD = RunSpec.fields_where("workload")  # what the measured work is (launch.ranks.runspec)


def key(result: Result) -> tuple:
    """Results pair when they measured the same work on the same fabric and ranks."""
    result = as_result(result)
    fields = typed(result)

    def workload(name: str):  # the spec's, else a top-level field of that name
        found = getattr(fields.spec, name, None) if fields is not None and fields.spec is not None else None
        return found if found is not None else getattr(fields, name, None)

    sizes = tuple(row.get("bytes") for row in result.sizes)
    return (*(workload(name) for name in WORKLOAD), result.fabric, result.world_size, sizes)


def values(result: Result) -> dict[str, tuple[float, float | None]]:
    """metric -> (value, 95 % CI half-width or None), from the samples where the result has them
    (bench.stats.robust; a training run's after the warm-up its samples give); a figure without samples is taken only if it is a finite number, and
    without an interval. The result's samples are plausible (`plausible`)."""
    out: dict[str, tuple[float, float | None]] = {}
    ranks = max(1, result.world_size or 1)
    throughput = total_samples(result)
    if throughput:
        found = robust(throughput[steady_cut_recomputed(result) or 0 :])  # the warm-up its samples give, cut
        out["total_img_per_s"] = (found.value, found.ci95)
        out["per_rank_img_per_s"] = (found.value / ranks, found.ci95 / ranks if found.ci95 is not None else None)
    elif result.total_img_per_s is not None:
        out["total_img_per_s"] = (result.total_img_per_s, None)
        out["per_rank_img_per_s"] = (result.total_img_per_s / ranks, None)
    for name in ("comm_fraction", "step_time_s"):
        figure = number(field_of(result, name))
        if figure is not None:
            out[name] = (figure, None)
    for row in result.sizes:
        again = busbw_robust(row, result)
        if again is not None:
            out[f"busbw_gbit_s@{row.get('bytes')}"] = again
        elif (busbw := number(row.get("busbw_gbit_s"))) is not None:
            out[f"busbw_gbit_s@{row.get('bytes')}"] = (busbw, None)
    return out


def busbw_robust(row: dict, result: Result) -> tuple[float, float | None] | None:
    """(busbw Gbit/s at the median time, its 95 % CI half-width) of a size sweep's row, from its
    per-iteration times (bench.stats.robust), by its kind's factor; None where it cannot say."""
    from bench.allreduce import gbit_s

    factor = _busbw_factor(result)
    times = [v for v in map(number, _listed(row.get("samples_us"))) if v is not None]
    nbytes = number(row.get("bytes"))
    if not times or not nbytes or factor is None or any(t <= 0 for t in times):
        return None
    summary = robust(times)
    busbw = gbit_s(nbytes, statistics.median(times) * 1e-6) * factor
    return busbw, busbw * summary.ci95 / summary.value if summary.ci95 is not None else None


def tolerance_for(metric: str, tolerances: dict[str, float], default: float | None) -> float:
    base = metric.split("@")[0]
    for name in (metric, base):
        if name in tolerances:
            return tolerances[name]
    return default if default is not None else DEFAULT_TOLERANCE.get(base, 0.10)


def compare_pair(a: Result, b: Result, tolerances: dict[str, float], default: float | None = None) -> list[Metric]:
    try:
        va, vb = values(a), values(b)
    except ArithmeticError as exc:  # plausible samples cannot overflow; anything else is still one line
        raise UsageError(
            f"{terminal(a.run_id)} vs {terminal(b.run_id)}: the figures cannot be computed ({exc})"
        ) from None
    return [
        Metric(name, va[name][0], vb[name][0], va[name][1], vb[name][1], tolerance_for(name, tolerances, default))
        for name in va
        if name in vb
    ]


def pair(a: list[Result], b: list[Result]) -> tuple[list[tuple[Result, Result]], list[str]]:
    """Pairs by key (one result each: paired directly); unpaired runs as messages."""
    if len(a) == 1 and len(b) == 1:
        return [(a[0], b[0])], []
    by_key: dict[tuple, Result] = {}
    for result in b:
        by_key.setdefault(key(result), result)
    pairs, missing = [], []
    for result in a:
        partner = by_key.pop(key(result), None)
        if partner is None:
            missing.append(f"{result.run_id}: no matching run in B")
        else:
            pairs.append((result, partner))
    missing += [f"{r.run_id}: no matching run in A" for r in by_key.values()]
    return pairs, missing


def parse_tolerances(pairs: list[str]) -> dict[str, float]:
    out = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        try:
            out[name] = float(value.rstrip("%")) / (100 if value.endswith("%") else 1)
        except ValueError:
            raise UsageError(f"--tolerance expects METRIC=FRACTION (e.g. total_img_per_s=0.05), got {text!r}") from None
        if not sep or not name or out[name] < 0:
            raise UsageError(f"--tolerance expects METRIC=FRACTION (e.g. total_img_per_s=0.05), got {text!r}")
    return out
