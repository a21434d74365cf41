"""The step-time series of a run: was it steady while it was timed?

A run's own samples (one per timed iteration: img/s, seconds, or an allreduce's
microseconds), after the warm-up its figures cut (bench.steady_state, the result's
`steady_state`), are turned into step times and read three ways:

- coefficient of variation (standard deviation / mean of the step times);
- drift: the second half's mean step time against the first half's (+0.2: 20 % slower);
- outliers: the share of steps slower than OUTLIER_FACTOR x the median step.

Each is set against its limit (docs/disturbance.md says why these): a run past any of
them is `unsteady`. That is a property of the run, not a cause from outside (which only the
host's signals name, launch.disturbance.judge): an unsteady run stays in points and verdicts,
its wider CI saying how far to trust it.
"""

from __future__ import annotations

import statistics

CV_LIMIT = 0.15  # a quiet 2-core host: 0.01-0.08 (docs/disturbance.md)
DRIFT_LIMIT = 0.15  # second half vs first half
OUTLIER_FACTOR = 1.5  # a step this many times the median is an outlier
OUTLIER_SHARE_LIMIT = 0.2  # more than one step in five
MIN_STEPS = 4  # fewer: too short a series to judge (not measured)


def step_times(samples: list[float], higher_is_better: bool) -> list[float]:
    """Step times from a run's samples: a rate (img/s, Gbit/s) is inverted, a time kept."""
    values = [s for s in samples if s > 0]
    return [1.0 / s for s in values] if higher_is_better else values


def series_figures(times: list[float]) -> dict:
    """cv, drift, outlier share and the verdict of one step-time series."""
    if len(times) < MIN_STEPS:
        return {
            "verdict": "not measured",
            "steps": len(times),
            "why": f"{len(times)} timed steps (fewer than {MIN_STEPS}: too few to judge)",
        }
    mean = statistics.fmean(times)
    median = statistics.median(times)
    half = len(times) // 2
    first, second = statistics.fmean(times[:half]), statistics.fmean(times[len(times) - half :])
    cv = statistics.stdev(times) / mean
    drift = second / first - 1.0
    outliers = [t for t in times if t > OUTLIER_FACTOR * median]
    share = len(outliers) / len(times)
    reasons = []
    if cv > CV_LIMIT:
        reasons.append(f"step times varied by {cv:.0%} (coefficient of variation; limit {CV_LIMIT:.0%})")
    if abs(drift) > DRIFT_LIMIT:
        reasons.append(
            f"the second half's steps were {abs(drift):.0%} {'slower' if drift > 0 else 'faster'} "
            f"than the first half's (limit {DRIFT_LIMIT:.0%})"
        )
    if share > OUTLIER_SHARE_LIMIT:
        reasons.append(
            f"{len(outliers)} of {len(times)} steps took over {OUTLIER_FACTOR:g}x the median "
            f"(limit {OUTLIER_SHARE_LIMIT:.0%} of steps)"
        )
    return {
        "verdict": "unsteady" if reasons else "steady",
        "steps": len(times),
        "cv": round(cv, 4),
        "drift": round(drift, 4),
        "outlier_share": round(share, 4),
        "slowest_over_median": round(max(times) / median, 3),
        "reasons": reasons,
    }
