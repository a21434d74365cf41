"""Compare results A (reference) and B (candidate), figure by figure, as each result's kind
declares its figures (launch.kinds.kind: a training run's img/s, communication share and step time,
a size sweep's busbw at each message size, the halo proxy's time per iteration): each figure's
value, unit, direction (higher or lower is better) and tolerance are the kind's.

B is within tolerance of A unless it is worse (lower where higher is better, higher where lower
is) by more than tolerance x |A| and by more than the runs' combined noise (sqrt(ciA^2 + ciB^2)
from the 95 % CIs): a difference the measurement cannot resolve is not a regression, and a
better B is no failure (its row says "better"). Values and intervals are recomputed from each
result's own samples by its kind (a result from another site is data to check, not figures to
believe); a stored figure its samples do not give is reported (result.disagreements). Every
sample and figure read is first a finite number in the range its kind declares plausible
(`plausible`: no negative, zero or impossible throughput, time or bandwidth; else the result is
refused in one line), and the interval is one that a few wild samples cannot widen
(bench.stats.robust: the mean's Student-t interval where no sample is an outlier by the median's
own scale, else the median's distribution-free interval, or none). Runs in two directories are
paired by what defines them (benchmark, engine, model, fabric, ranks, sizes); a run without a
partner is reported, not compared; two single results of different kinds are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from launch.errors import UsageError
from launch.kinds import kind_of
from launch.kinds.kind import Figure
from launch.ranks.runspec import RunSpec
from launch.results.result import Result, files_under, malformed, read_tree, typed
from launch.shapes import sample, terminal


@dataclass(frozen=True)
class Metric:
    """One figure of A and B side by side."""

    name: str
    a: float
    b: float
    ci_a: float | None
    ci_b: float | None
    tolerance: float
    higher_is_better: bool = True
    unit: str = ""

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a else None

    @property
    def noise(self) -> float:
        return math.hypot(self.ci_a or 0.0, self.ci_b or 0.0)

    @property
    def worse_by(self) -> float:
        """How much worse B is than A in the figure's direction (negative: better)."""
        return (self.a - self.b) if self.higher_is_better else (self.b - self.a)

    @property
    def within(self) -> bool:
        return self.worse_by <= max(self.tolerance * abs(self.a), self.noise)

    @property
    def change(self) -> str:
        """'worse', 'better' (beyond the tolerance and the noise) or 'within'."""
        margin = max(self.tolerance * abs(self.a), self.noise)
        return "worse" if self.worse_by > margin else "better" if -self.worse_by > margin else "within"


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
    """The result, where every sample and figure compare reads is a finite number in the range its
    kind declares plausible (launch.kinds: Kind.bounds); else one line naming the result (`where`)
    and the field."""
    where, found, fields = terminal(where), kind_of(result), typed(result)
    for bound in found.bounds(fields) if found is not None and fields is not None else []:
        sample(f"{where}: {bound.field}", bound.value, bound.low, bound.high)
    return result


WORKLOAD = RunSpec.fields_where("workload")  # what the measured work is (launch.ranks.runspec)


def key(result: Result) -> tuple:
    """Results pair when they measured the same work (by their kind: a sweep's sizes too) on the
    same fabric and ranks."""
    found, fields = kind_of(result), typed(result)

    def workload(name: str) -> object:  # the typed spec's (a kind's own option an extra of it), else a field's
        value = getattr(result.spec, name, None)
        return value if value is not None else getattr(fields, name, None)

    measured = found.measured_at(fields) if found is not None and fields is not None else ()
    return (*(workload(name) for name in WORKLOAD), result.fabric, result.world_size, measured)


def values(result: Result) -> dict[str, Figure]:
    """Its kind's figures by name (launch.kinds: Kind.figures), recomputed from its samples where it
    has them; a figure without samples is taken only if it is a finite number, and without an
    interval. The result's samples are plausible (`plausible`)."""
    found, fields = kind_of(result), typed(result)
    return {f.name: f for f in (found.figures(fields) if found is not None and fields is not None else [])}


def tolerance_for(name: str, tolerances: dict[str, float], default: float | None, declared: float) -> float:
    """--tolerance for the figure (by its whole name, else its name before '@'), else
    --default-tolerance, else the kind's."""
    for asked in (name, name.split("@")[0]):
        if asked in tolerances:
            return tolerances[asked]
    return default if default is not None else declared


def compare_pair(a: Result, b: Result, tolerances: dict[str, float], default: float | None = None) -> list[Metric]:
    """A's and B's figures of the same name side by side, with their kind's direction and tolerance."""
    try:
        va, vb = values(a), values(b)
    except ArithmeticError as exc:  # plausible samples cannot overflow; anything else is still one line
        raise UsageError(
            f"{terminal(a.run_id)} vs {terminal(b.run_id)}: the figures cannot be computed ({exc})"
        ) from None
    return [
        Metric(
            name,
            fa.value,
            vb[name].value,
            fa.ci95,
            vb[name].ci95,
            tolerance_for(name, tolerances, default, fa.tolerance),
            fa.higher_is_better,
            fa.unit,
        )
        for name, fa in va.items()
        if name in vb
    ]


def label(result: Result) -> str:
    """How a compared run is named: how it communicated / what ran x its ranks ('ddp/resnet18 x2',
    'mpi/allreduce x2'), as its kind says."""
    found, fields = kind_of(result), typed(result)
    if found is None or fields is None:
        return f"-/- x{result.world_size}"
    return f"{found.communicates(fields)}/{found.subject(fields)} x{result.world_size}"


def kind_name(result: Result) -> str:
    found = kind_of(result)
    return found.name if found is not None else "unknown"


def pair(a: list[Result], b: list[Result]) -> tuple[list[tuple[Result, Result]], list[str]]:
    """Pairs by key (one result each: paired directly, if they are of one kind); unpaired runs as
    messages."""
    if len(a) == 1 and len(b) == 1:
        if kind_of(a[0]) is not kind_of(b[0]):
            raise UsageError(
                terminal(
                    f"A {a[0].run_id} ({kind_name(a[0])}) and B {b[0].run_id} ({kind_name(b[0])}) are results "
                    "of different kinds: they have no figure in common"
                )
            )
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
