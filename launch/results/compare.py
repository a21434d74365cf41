"""Compare results A (reference) and B (candidate), metric by metric.

B is within tolerance of A when |B - A| <= tolerance x |A|, or when the
difference is inside the runs' combined noise (sqrt(ciA^2 + ciB^2) from the
95 % CIs): a difference the measurement cannot resolve is not a regression.
Values and intervals are recomputed from each result's own samples (a result
from another site is data to check, not figures to believe); a stored figure
its samples do not give is reported (`disagreements`).
Runs in two directories are paired by what defines them (benchmark, engine,
model, fabric, ranks, sizes); a run without a partner is reported, not compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from launch.results.result import (
    Result,
    as_result,
    busbw_recomputed,
    field_of,
    files_under,
    malformed,
    number,
    read_tree,
    throughput_recomputed,
    typed,
)

DEFAULT_TOLERANCE = {
    "total_img_per_s": 0.10,
    "per_rank_img_per_s": 0.10,
    "step_time_s": 0.10,
    "comm_fraction": 0.25,
    "busbw_gbit_s": 0.10,
}


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
        raise UsageError(problems[0])
    return results, None


def load_archive(path: Path, allowed_signers: Path | None = None, require_signed: bool = False):
    """(results, provenance) of an archive: verified member by member, its signature checked."""
    from launch.provenance import archive as archives

    verified = archives.read(path)
    provenance = verified.provenance(allowed_signers, require_signed)
    found = verified.results()
    results = list(found.values())
    problems = [f"archive {path}: {name}: malformed: {why}" for name, r in found.items() if (why := malformed(r))]
    if problems:
        raise UsageError(problems[0])
    if not results:
        raise UsageError(f"archive {path} holds no results")
    return results, provenance


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
    """metric -> (value, 95 % CI half-width or None), from the samples where the result has them;
    a figure without samples is taken only if it is a finite number, and without an interval."""
    out: dict[str, tuple[float, float | None]] = {}
    ranks = max(1, result.world_size or 1)
    recomputed = throughput_recomputed(result)
    if recomputed is not None:
        total, ci = recomputed
        out["total_img_per_s"] = (total, ci)
        out["per_rank_img_per_s"] = (total / ranks, ci / ranks if ci is not None else None)
    elif result.total_img_per_s is not None:
        out["total_img_per_s"] = (result.total_img_per_s, None)
        out["per_rank_img_per_s"] = (result.total_img_per_s / ranks, None)
    for name in ("comm_fraction", "step_time_s"):
        figure = number(field_of(result, name))
        if figure is not None:
            out[name] = (figure, None)
    for row in result.sizes:
        again = busbw_recomputed(row, result.world_size, result.benchmark)
        if again is not None:
            out[f"busbw_gbit_s@{row.get('bytes')}"] = again
        elif (busbw := number(row.get("busbw_gbit_s"))) is not None:
            out[f"busbw_gbit_s@{row.get('bytes')}"] = (busbw, None)
    return out


def tolerance_for(metric: str, tolerances: dict[str, float], default: float | None) -> float:
    base = metric.split("@")[0]
    for name in (metric, base):
        if name in tolerances:
            return tolerances[name]
    return default if default is not None else DEFAULT_TOLERANCE.get(base, 0.10)


def compare_pair(a: Result, b: Result, tolerances: dict[str, float], default: float | None = None) -> list[Metric]:
    va, vb = values(a), values(b)
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
