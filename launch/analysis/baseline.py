"""Is this number normal for this site? Baselines from the results store, a verdict for every run,
and the points where a key's history changed (docs/baselines.md says it for operators).

- A *key* is what makes runs comparable: the benchmark kind and what ran (model, grid), the fabric,
  how the ranks communicate (engine or backend), the allreduce and GPUDirect knobs, ranks, nodes,
  GPUs per node, and the RunSpec settings the kind reads that change its figure (batch, image
  size, precision, largest message). Its figure is the kind's figure of merit (launch.kinds).
- An *era* of a key is a stretch of its history on one stack (the image's stack digest; on the
  host, a digest of the software versions the result records) and one benchmark version (the
  bundle commit that wrote the result). A baseline never mixes eras: a new stack or bundle starts
  a new baseline, and says so.
- The *baseline* of a run is its era's clean runs before it, within a window (the last
  WINDOW_RUNS clean runs, or the days before it): their median, a 95 % bootstrap CI of the median
  (BOOTSTRAP_DRAWS resamples, seed BOOTSTRAP_SEED) and their spread (1.4826 x the median absolute
  deviation over the median: a robust relative standard deviation). Disturbed runs are left out
  and named; fewer than MIN_RUNS clean runs is "no baseline yet (n of MIN_RUNS)". Only this
  site's own runs count: written here (never pulled from another site, whatever origin they
  claim: issue 64, C-7), from origin hosts matching its patterns (launch.results.origins). Every
  origin's, pulled ones included, only when asked (`--any-origin`), and then each pulled run is
  labelled with the site that signed it, in the words, the verdict record and the metrics.
- The *verdict* works on speed (the figure, or 1 / the figure for a time): with the margin
  m = max(2 x spread, MIN_MARGIN), a run is `slow` when its speed is below the CI's low end x
  (1 - m), `fast` when above the high end x (1 + m), else `normal`; a disturbed run is not judged.
  Its difference is its speed over the baseline median's, minus 1, with a 95 % bootstrap CI (the
  baseline's runs and the run's own iterations resampled) and a confidence: the share of those
  draws on the verdict's side of the margin. Same inputs, byte-identical verdicts.
- *Change points*: ruptures' PELT (cost l2) on the log of a key's clean figures in time order,
  penalty CHANGE_PENALTY x sigma^2 x ln n (sigma from the successive differences, robust to the
  steps themselves), segments of at least CHANGE_MIN_RUNS runs, changes under CHANGE_MIN_SIZE
  dropped.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import sys
from calendar import timegm
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from time import gmtime, strftime, strptime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Sequence

from launch.errors import UsageError
from launch.kinds import kind_of
from launch.analysis import aggregate, metrics
from launch.results import store
from launch.results.origins import ORIGINS_ENV as ORIGINS_ENV  # this site's origins, as callers name them
from launch.results.origins import host_of, matches, origin_patterns
from launch.results.result import Result, as_result, disturbance_causes, disturbed, field_of, parse, typed, unsteady

if TYPE_CHECKING:  # numpy is imported where the statistics run (_np)
    from numpy import ndarray

WINDOW_RUNS = 10  # the last this many clean runs of the era
MIN_RUNS = 5  # fewer clean runs: no baseline yet
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 53
MIN_MARGIN = 0.20  # runs on this 2-core machine have differed by +-20 % with nothing wrong
SPREAD_MARGINS = 2.0  # the margin in spreads (robust standard deviations) where that is wider
CHANGE_PENALTY = 4.0
CHANGE_MIN_RUNS = 3
CHANGE_MIN_SIZE = 0.10
VERDICTS = store.BASELINE_VERDICTS  # normal, slow, fast, no baseline yet, disturbed
FORMAT = "fabric-bench baseline verdict 1"
# RunSpec settings that change a figure, where the run's kind reads them (launch.kinds: not_read)
SETTINGS = (
    "batch_size",
    "image_size",
    "precision",
    "max_bytes",
    "max_seconds_per_size",
    "nvls",
    "sharp",
)  # None is left out of a key: one made before nvls, sharp or max_seconds_per_size keeps its id


# ------------------------------------------------------------------ runs and keys


@dataclass(frozen=True)
class Key:
    benchmark: str
    subject: str
    fabric: str
    via: str  # engine or backend
    ranks: int
    nodes: int
    gpus_per_node: Optional[int] = None
    allreduce: Optional[str] = None
    gpudirect: Optional[str] = None
    settings: tuple[tuple[str, str | int | float], ...] = ()

    @property
    def id(self) -> str:
        """12 hex digits of the key's sha256: its metrics file and its label."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:12]

    def as_dict(self) -> dict:
        return {**asdict(self), "settings": dict(self.settings)}

    def words(self) -> str:
        knobs = [
            f"allreduce {self.allreduce}" if self.allreduce else "",
            f"gdr-{self.gpudirect}" if self.gpudirect else "",
        ]
        knobs += [f"{name} {value}" for name, value in self.settings]
        gpus = f", {self.gpus_per_node} GPU/node" if self.gpus_per_node else ""
        nodes = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        return " · ".join(
            [self.fabric, self.subject, self.via, f"{self.ranks} ranks on {nodes}{gpus}", *filter(None, knobs)]
        )


@dataclass(frozen=True)
class Figure:
    """A kind's figure of merit (launch.kinds.kind.Metric), as a verdict names it."""

    name: str
    label: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Run:
    run_id: str
    when: Optional[float]  # unix seconds of the run id's UTC stamp
    key: Key
    figure: Figure
    value: float
    samples: tuple[float, ...]  # its steady iterations' values (launch.analysis.aggregate.run_samples)
    stack: str
    version: str  # the bundle commit that wrote it
    origin: str
    disturbed: bool
    causes: tuple[str, ...] = ()
    unsteady: bool = False
    path: Optional[str] = None
    image: Optional[str] = None
    slurm_job: Optional[str] = None
    pulled_from: str = ""  # the site that signed it, where it was pulled ('': written here)

    @property
    def speed(self) -> float:
        return self.value if self.figure.higher_is_better else 1 / self.value

    @property
    def era(self) -> tuple[str, str]:
        return self.stack, self.version


def when_of(run_id: str) -> Optional[float]:
    """The UTC stamp a run id starts with (launch.results.assemble.new_run_id), as unix seconds."""
    try:
        return float(timegm(strptime(run_id[:15], "%Y%m%dT%H%M%S")))
    except ValueError:
        return None


def stack_of(result: Result) -> str:
    """The image's stack digest (else its own digest); a host run: 'host:' and a digest of the
    software versions its result records."""
    image = field_of(result, "image")
    if isinstance(image, dict):
        for name in ("stack_digest", "digest"):
            if isinstance(image.get(name), str) and image[name]:
                return str(image[name])
    versions = field_of(result, "versions")
    text = json.dumps(versions if isinstance(versions, dict) else {}, sort_keys=True, default=str)
    return "host:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def key_of(result: Result) -> Optional[Key]:
    found = kind_of(result)
    ranks = aggregate.ranks_of(result)
    if found is None or ranks is None:
        return None
    spec = aggregate.spec_of(result)
    gpus = spec.gpus_per_node
    return Key(
        benchmark=found.name,
        subject=aggregate.subject_of(result),
        fabric=aggregate.fabric_label(result),
        via=aggregate.what_of(result),
        ranks=ranks,
        nodes=aggregate.nodes_of(result),
        gpus_per_node=gpus or None,
        allreduce=spec.allreduce,
        gpudirect=spec.gpudirect,
        settings=tuple(  # max_bytes: a size sweep's own option, an extra of the typed spec
            (name, value)
            for name in SETTINGS
            if name not in found.not_read and isinstance(value := getattr(spec, name, None), (str, int, float))
        ),
    )


def run_of(result: Result, origin: str, pulled_from: str = "") -> Optional[Run]:
    """A result as a run of its key; None where it has no key or no positive figure (not ok).
    `pulled_from`: the site that signed it, where it was pulled."""
    found, fields, key = kind_of(result), typed(result), key_of(result)
    value = found.value(fields) if found is not None and fields is not None else None
    if found is None or key is None or result.status != "ok" or value is None or not value > 0:
        return None
    metric = found.metric
    image, slurm, origin_record = (field_of(result, name) for name in ("image", "slurm", "origin"))
    commit = origin_record.get("bundle_commit") if isinstance(origin_record, dict) else None
    job = slurm.get("job_id") if isinstance(slurm, dict) else None
    where = image.get("path") if isinstance(image, dict) else None
    return Run(
        run_id=result.run_id,
        when=when_of(result.run_id),
        key=key,
        figure=Figure(metric.name, metric.label, metric.unit, metric.higher_is_better),
        value=float(value),
        samples=tuple(float(s) for s in aggregate.run_samples(result) if s > 0),
        stack=stack_of(result),
        version=str(commit or "unknown"),
        origin=origin,
        disturbed=disturbed(result),
        causes=tuple(disturbance_causes(result)),
        unsteady=unsteady(result),
        path=str(result.path) if result.path is not None else None,
        image=str(where) if where else None,
        slurm_job=str(job) if job else None,
        pulled_from=pulled_from,
    )


def load(db: sqlite3.Connection, origins: Optional[Sequence[str]], **filters: Any) -> list[Run]:
    """The store's ok runs (filters: launch.results.store.query's), oldest first, one per run id,
    origin and site: this site's own (written here, never pulled) from origin hosts matching
    `origins`; None: every origin's, pulled ones included (each with the site that signed it)."""
    runs: dict[tuple[str, str, str], Run] = {}
    for row in store.query(db, None, status="ok", **filters):
        site = store.pulled_from(db, row)
        if origins is not None and (site or not matches(host_of(row["origin"]), origins)):
            continue
        try:
            one = run_of(parse(row["result"], Path(row["path"])), row["origin"], site)
        except UsageError:  # a row whose JSON is not a result (written by hand): not a run
            continue
        if one is not None and (one.run_id, one.origin, site) not in runs:
            runs[one.run_id, one.origin, site] = one
    return sorted(runs.values(), key=order)


def order(run: Run) -> tuple[float, str, str, str]:
    return (run.when if run.when is not None else -math.inf, run.run_id, run.origin, run.pulled_from)


def histories(runs: Sequence[Run]) -> dict[Key, list[Run]]:
    """The runs of each key, oldest first; keys by their words."""
    groups: dict[Key, list[Run]] = {}
    for run in sorted(runs, key=order):
        groups.setdefault(run.key, []).append(run)
    return dict(sorted(groups.items(), key=lambda item: (item[0].words(), item[0].id)))


# ------------------------------------------------------------------ statistics


def _np() -> ModuleType:
    import numpy

    return numpy


def median_draws(values: Sequence[float], seed: int = BOOTSTRAP_SEED) -> ndarray:
    """BOOTSTRAP_DRAWS medians of resamples of `values` (fixed seed: the same values, the same draws)."""
    np = _np()
    data = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(data), size=(BOOTSTRAP_DRAWS, len(data)))
    return np.median(data[picks], axis=1)


def spread_of(speeds: Sequence[float]) -> float:
    np = _np()
    data = np.asarray(speeds, dtype=float)
    middle = float(np.median(data))
    return float(1.4826 * np.median(np.abs(data - middle)) / middle)


def sig(value: Optional[float], digits: int = 6) -> Optional[float]:
    """A figure to `digits` significant digits: what a verdict file and its words hold."""
    return None if value is None or not math.isfinite(value) else float(f"{value:.{digits}g}")


@dataclass(frozen=True)
class Baseline:
    """A run's baseline: its era's clean runs before it in the window, and what they give."""

    key: Key
    figure: Figure
    stack: str
    version: str
    window: str  # in words: "the last 10 clean runs"
    run_ids: tuple[str, ...]  # the clean runs it rests on, oldest first
    speeds: tuple[float, ...]
    left_out: tuple[str, ...] = ()  # disturbed runs in its span
    started: Optional[str] = None  # where this era began, in words, when runs of another were before it
    ready: bool = False
    median: Optional[float] = None  # speeds: the figure itself, or 1 / a time
    ci95: Optional[tuple[float, float]] = None
    spread: Optional[float] = None
    pulled: tuple[tuple[str, str], ...] = ()  # (run id, the site that signed it) of its runs pulled (--any-origin)

    def pulled_words(self) -> str:
        """'; N of them pulled (site, ...)' where runs of other sites are among its runs; else ''."""
        sites = sorted({site for _, site in self.pulled})
        return f"; {len(self.pulled)} of them pulled from {', '.join(sites)}" if self.pulled else ""

    def figure_of(self, speed: Optional[float]) -> Optional[float]:
        """A speed back in the figure's units."""
        return None if speed is None else speed if self.figure.higher_is_better else 1 / speed

    def figure_ci(self) -> Optional[tuple[float, float]]:
        if self.ci95 is None:
            return None
        low, high = (self.figure_of(x) for x in self.ci95)
        assert low is not None and high is not None
        return (low, high) if self.figure.higher_is_better else (high, low)

    def words(self) -> str:
        if not self.ready:
            left = f"; {len(self.left_out)} disturbed left out" if self.left_out else ""
            return f"no baseline yet ({len(self.run_ids)} of {MIN_RUNS} clean runs{self.pulled_words()}{left})"
        ci, unit = self.figure_ci(), self.figure.unit
        assert ci is not None and self.spread is not None
        text = (
            f"{self.figure.label} {_num(self.figure_of(self.median))} {unit} median, 95 % CI "
            f"{_num(ci[0])}-{_num(ci[1])}, spread ±{self.spread:.1%}, from {len(self.run_ids)} clean runs "
            f"({self.window}{self.pulled_words()})"
        )
        if self.left_out:
            text += f"; {len(self.left_out)} disturbed left out: {', '.join(self.left_out)}"
        return text


def _num(value: Optional[float]) -> str:
    return "-" if value is None else format(value, ".4g")


def baseline_before(
    history: Sequence[Run], at: int, window_runs: int = WINDOW_RUNS, days: Optional[float] = None
) -> Baseline:
    """The baseline of history[at] (history: one key's runs, oldest first): its era's clean runs
    before it, the last `window_runs` of them, or those of the `days` before it."""
    judged = history[at]
    start = at
    while start > 0 and history[start - 1].era == judged.era:
        start -= 1
    before = list(history[start:at])
    if days is not None:
        since = (judged.when or 0) - days * 86400
        before = [r for r in before if r.when is not None and r.when >= since]
        window = f"the {days:g} days before the run"
    else:  # a full window spans from its first clean run; the disturbed runs in that span are named
        clean = [r for r in before if not r.disturbed]
        if len(clean) > window_runs:
            before = [r for r in before if order(r) >= order(clean[-window_runs])]
        window = f"the last {window_runs} clean runs"
    clean = [r for r in before if not r.disturbed]
    started = None
    if start > 0:
        previous = history[start - 1]
        changed = [
            f"stack {previous.stack[:19]} -> {judged.stack[:19]}" if previous.stack != judged.stack else "",
            f"bundle {previous.version[:7]} -> {judged.version[:7]}" if previous.version != judged.version else "",
        ]
        first = history[start].run_id
        started = f"new baseline since {first} ({', '.join(filter(None, changed))}): runs before it are not mixed in"
    found = Baseline(
        key=judged.key,
        figure=judged.figure,
        stack=judged.stack,
        version=judged.version,
        window=window,
        run_ids=tuple(r.run_id for r in clean),
        speeds=tuple(r.speed for r in clean),
        left_out=tuple(r.run_id for r in before if r.disturbed),
        started=started,
        pulled=tuple((r.run_id, r.pulled_from) for r in clean if r.pulled_from),
    )
    if len(clean) < MIN_RUNS:
        return found
    np = _np()
    draws = median_draws(found.speeds)
    low, high = (float(x) for x in np.percentile(draws, [2.5, 97.5]))
    median = float(np.median(np.asarray(found.speeds)))
    return replace(found, ready=True, median=median, ci95=(low, high), spread=spread_of(found.speeds))


@dataclass(frozen=True)
class Verdict:
    run: Run
    baseline: Baseline
    verdict: str  # one of VERDICTS
    margin: Optional[float] = None
    difference: Optional[float] = None  # speed / baseline median - 1
    difference_ci95: Optional[tuple[float, float]] = None
    confidence: Optional[float] = None

    def words(self) -> str:
        pulled = f"; the run was pulled from {self.run.pulled_from}" if self.run.pulled_from else ""
        return self._words() + pulled

    def _words(self) -> str:
        if self.verdict == "disturbed":
            return f"disturbed: not judged ({'; '.join(self.run.causes) or 'an outside cause'})"
        if not self.baseline.ready:
            return self.baseline.words()
        assert self.difference is not None and self.difference_ci95 is not None and self.confidence is not None
        low, high = self.difference_ci95
        side = "below" if self.difference < 0 else "above"
        return (
            f"{self.verdict}: {abs(self.difference):.1%} {side} this site's baseline (95 % CI {low:+.1%} to "
            f"{high:+.1%}; confidence {self.confidence:.0%}; margin ±{self.margin:.0%})"
        )

    def record(self) -> dict:
        """What baseline.json holds: the same inputs give the same bytes (`text`). Runs pulled from
        other sites (--any-origin) are named with the site that signed them (`pulled_from`)."""
        run, base = self.run, self.baseline
        ci = base.figure_ci()
        judged_against = {
            "ready": base.ready,
            "runs": len(base.run_ids),
            "needed": MIN_RUNS,
            "window": base.window,
            "run_ids": list(base.run_ids),
            "left_out_disturbed": list(base.left_out),
            "new_baseline": base.started,
            "median": sig(base.figure_of(base.median)),
            "ci95": [sig(x) for x in ci] if ci else None,
            "spread": sig(base.spread),
            "stack": base.stack,
            "bundle_commit": base.version,
            "words": base.words(),
        }
        judged = {
            "when_unix": run.when,
            "origin": run.origin,
            "stack": run.stack,
            "bundle_commit": run.version,
            "image": run.image,
            "slurm_job": run.slurm_job,
            "disturbed": run.disturbed,
            "unsteady": run.unsteady,
        }
        if base.pulled:  # --any-origin: the runs of other sites, each with the site that signed it
            judged_against["pulled_from"] = dict(base.pulled)
        if run.pulled_from:
            judged["pulled_from"] = run.pulled_from
        return {
            "format": FORMAT,
            "run_id": run.run_id,
            "key": run.key.as_dict(),
            "key_id": run.key.id,
            "key_words": run.key.words(),
            "figure": {**asdict(run.figure), "value": sig(run.value)},
            "verdict": self.verdict,
            "words": self.words(),
            "baseline": judged_against,
            "difference": {
                "speed_ratio_minus_1": sig(self.difference),
                "ci95": [sig(x) for x in self.difference_ci95] if self.difference_ci95 else None,
                "confidence": sig(self.confidence),
                "margin": sig(self.margin),
            },
            "run": judged,
            "method": {
                "bootstrap_draws": BOOTSTRAP_DRAWS,
                "bootstrap_seed": BOOTSTRAP_SEED,
                "min_runs": MIN_RUNS,
                "margin": f"max({SPREAD_MARGINS:g} x spread, {MIN_MARGIN:.0%})",
                "rule": "slow: speed < CI low x (1 - margin); fast: speed > CI high x (1 + margin); "
                "speed: the figure, or 1 / the figure for a time",
            },
        }

    def text(self) -> str:
        return json.dumps(self.record(), indent=2, sort_keys=True) + "\n"


def judge(history: Sequence[Run], at: int, window_runs: int = WINDOW_RUNS, days: Optional[float] = None) -> Verdict:
    """history[at]'s verdict against its baseline (module docstring)."""
    run = history[at]
    base = baseline_before(history, at, window_runs, days)
    if run.disturbed:
        return Verdict(run, base, "disturbed")
    if not base.ready:
        return Verdict(run, base, "no baseline yet")
    assert base.median is not None and base.ci95 is not None and base.spread is not None
    np = _np()
    margin = max(SPREAD_MARGINS * base.spread, MIN_MARGIN)
    speed = run.speed
    verdict = (
        "slow" if speed < base.ci95[0] * (1 - margin) else "fast" if speed > base.ci95[1] * (1 + margin) else "normal"
    )
    medians = median_draws(base.speeds)
    iterations = np.asarray([s if run.figure.higher_is_better else 1 / s for s in run.samples], dtype=float)
    if len(iterations) > 1:  # the run's own iterations resampled, scaled so that all of them give its figure
        picks = np.random.default_rng(BOOTSTRAP_SEED + 1).integers(
            0, len(iterations), (BOOTSTRAP_DRAWS, len(iterations))
        )
        speeds = iterations[picks].mean(axis=1) * (speed / iterations.mean())
    else:
        speeds = np.full(BOOTSTRAP_DRAWS, speed)
    ratios = speeds / medians - 1
    low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    side = ratios < -margin if verdict == "slow" else ratios > margin if verdict == "fast" else abs(ratios) <= margin
    return Verdict(
        run,
        base,
        verdict,
        margin=margin,
        difference=speed / base.median - 1,
        difference_ci95=(low, high),
        confidence=float(np.mean(side)),
    )


# ------------------------------------------------------------------ change points


@dataclass(frozen=True)
class Change:
    run_id: str  # the first run after the change
    index: int  # its place among the key's clean runs
    before: float  # median figure of the segment before, and after
    after: float
    higher_is_better: bool

    @property
    def size(self) -> float:
        """Speed after over speed before, minus 1."""
        ratio = self.after / self.before
        return ratio - 1 if self.higher_is_better else 1 / ratio - 1

    def what(self) -> str:
        return f"median {_num(self.before)} -> {_num(self.after)} ({abs(self.size):.0%} {'slower' if self.size < 0 else 'faster'})"

    def words(self) -> str:
        return f"changed at {self.run_id}: {self.what()}"


def change_points(history: Sequence[Run]) -> list[Change]:
    """Where a key's clean figures changed, oldest first (module docstring: PELT, its penalty)."""
    np = _np()
    clean = [r for r in history if not r.disturbed]
    if len(clean) < 2 * CHANGE_MIN_RUNS:
        return []
    import ruptures

    signal = np.log([r.value for r in clean])
    sigma = max(1.4826 * float(np.median(np.abs(np.diff(signal)))) / math.sqrt(2), 0.01)
    penalty = CHANGE_PENALTY * sigma**2 * math.log(len(signal))
    found = ruptures.Pelt(model="l2", min_size=CHANGE_MIN_RUNS, jump=1).fit(signal.reshape(-1, 1))
    cuts = [int(c) for c in found.predict(pen=penalty)[:-1]]
    values = np.asarray([r.value for r in clean])

    def changes(kept: list[int]) -> list[Change]:
        bounds = [0, *kept, len(values)]
        return [
            Change(
                clean[cut].run_id,
                cut,
                float(np.median(values[bounds[i] : cut])),
                float(np.median(values[cut : bounds[i + 2]])),
                clean[cut].figure.higher_is_better,
            )
            for i, cut in enumerate(kept)
        ]

    while cuts:  # the smallest change under CHANGE_MIN_SIZE goes, and its neighbours are measured anew
        found_changes = changes(cuts)
        smallest = min(range(len(cuts)), key=lambda i: abs(found_changes[i].size))
        if abs(found_changes[smallest].size) >= CHANGE_MIN_SIZE:
            return found_changes
        cuts.pop(smallest)
    return []


def stack_changes(history: Sequence[Run]) -> list[int]:
    """Indices in `history` where a new era (stack or bundle) began."""
    return [i for i in range(1, len(history)) if history[i].era != history[i - 1].era]


# ------------------------------------------------------------------ surveys and runs


@dataclass
class KeyReport:
    key: Key
    history: list[Run]
    verdict: Verdict  # the newest run's
    changes: list[Change] = field(default_factory=list)


def survey(
    db: sqlite3.Connection,
    origins: Optional[Sequence[str]],
    window_runs: int = WINDOW_RUNS,
    days: Optional[float] = None,
    run_id: Optional[str] = None,
    **filters: Any,
) -> list[KeyReport]:
    """Per key of the store's matching runs: the newest run's verdict (or `run_id`'s), and the
    key's change points."""
    if window_runs < 1 or (days is not None and days <= 0):
        raise UsageError("--runs must be >= 1 and --days > 0")
    reports = []
    for key, history in histories(load(db, origins, **filters)).items():
        at = len(history) - 1
        if run_id is not None:
            matches = [i for i, r in enumerate(history) if r.run_id.startswith(run_id)]
            if not matches:
                continue
            at = matches[-1]
        reports.append(KeyReport(key, history, judge(history, at, window_runs, days), change_points(history)))
    if run_id is not None and not reports:
        raise UsageError(f"no ok run {run_id!r} of this site's in the store")
    return reports


def verdict_of_run(db: sqlite3.Connection, result: Result, origins: Sequence[str]) -> Optional[Verdict]:
    """A new run's verdict against the store's runs of its key (the run itself may be indexed
    already or not); None where it has no figure (not ok)."""
    run = run_of(result, store.origin_of(result))
    if run is None:
        return None
    others = [
        r
        for r in load(db, origins, benchmark=run.key.benchmark, world_size=run.key.ranks, fabric=result.fabric)
        if r.key == run.key and r.run_id != run.run_id
    ]
    history = sorted([*others, run], key=order)
    return judge(history, history.index(run))


def after_run(run_dir: Path, result: dict, echo: bool = True) -> Optional[Verdict]:
    """After a run (launch.runs.run; `result`: the mapping its builder just wrote, read here once as a
    Result): its verdict against this site's baseline, written beside its
    result (baseline.json), recorded in the store, written as metrics where
    $FABRIC_BENCH_METRICS_DIR says, and printed. A problem warns; it never fails the run."""
    from containers.files import write_atomic

    as_run = as_result(result)
    try:
        origin = field_of(as_run, "origin")
        host = origin.get("host") if isinstance(origin, dict) else None
        with store.connect() as db:
            verdict = verdict_of_run(db, as_run, origin_patterns() if not host else [host, *origin_patterns()])
            if verdict is None:
                return None
            sidecar = write_atomic(Path(run_dir) / store.BASELINE_FILE, verdict.text())
            store.record_verdict(db, Path(run_dir) / "result.json", verdict.verdict)
        directory = metrics.directory()
        if directory is not None:
            metrics.write(directory, verdict.record())
    except (UsageError, sqlite3.Error, OSError, ValueError) as exc:
        print(f"fabric-bench: warning: no baseline verdict: {exc}", file=sys.stderr)
        return None
    if echo:
        from launch.shapes import terminal

        print(terminal(f"baseline: {verdict.words()} ({sidecar.name})"))
    return verdict


def words_beside(result: Result) -> str:
    """The verdict a run's baseline.json holds, in words (report tables); '-' where it has none, and
    for a run pulled from another site (the verdict beside it is that site's, not against this one's)."""
    from containers.untrusted import UntrustedInput, read_json

    path = result.path
    if path is not None and store.pulled_site_of_path(store.store_path().parent, path):
        return "-"
    verdict = store.verdict_beside(path) if path is not None else None
    if path is None or verdict is None:
        return "-"
    try:
        said = read_json(path.parent / store.BASELINE_FILE, 2**20, "baseline verdict").get("words")
    except (UntrustedInput, AttributeError):
        return verdict
    return said[:300] if isinstance(said, str) and said.startswith(verdict) else verdict


def stamp(when: Optional[float]) -> str:
    return "-" if when is None else strftime("%Y-%m-%d %H:%M", gmtime(when))
