"""Summary statistics for per-iteration samples (mean, median, 95 % CI)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from scipy import stats as scipy_stats


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    stdev: float
    ci95: float  # half-width of the 95 % confidence interval of the mean

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples: list[float]) -> Summary:
    """Student-t 95 % CI of the mean; a single sample has an infinite CI."""
    if not samples:
        raise ValueError("no samples to summarize")
    n = len(samples)
    mean = statistics.fmean(samples)
    median = statistics.median(samples)
    if n == 1:
        return Summary(n, mean, median, 0.0, math.inf)
    stdev = statistics.stdev(samples)
    half_width = scipy_stats.t.ppf(0.975, n - 1) * stdev / math.sqrt(n)
    return Summary(n, mean, median, stdev, float(half_width))
