"""Summary statistics for per-iteration samples (mean, median, 95 % CI), and an interval that a
few wild samples cannot widen (`robust`, for figures read from another site's results)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


# Student's t 97.5 % quantiles (the printed tables' values), for hosts without scipy: the GPU
# check on a bare host has torch and little else. With scipy, its exact quantile is used.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}  # fmt: skip
Z_975 = 1.959964


def t_975(df: int) -> float:
    """Student's t 97.5 % quantile with `df` degrees of freedom: scipy's where it is installed, else
    the table, linear in 1/df between its rows and towards the normal's beyond 120 (within 0.002)."""
    try:
        from scipy import stats as scipy_stats
    except ImportError:
        if df in T_975:
            return T_975[df]
        below = max(r for r in T_975 if r < df)
        above = min((r for r in T_975 if r > df), default=None)  # None: beyond the table, towards the normal
        high = Z_975 if above is None else T_975[above]
        weight = (1 / below - 1 / df) / (1 / below - (0 if above is None else 1 / above))
        return T_975[below] + (high - T_975[below]) * weight
    return float(scipy_stats.t.ppf(0.975, df))


def _binomial_half_cdf(j: int, n: int) -> float:
    """P(X <= j) for X ~ Binomial(n, 1/2), exactly."""
    return sum(math.comb(n, i) for i in range(j + 1)) / 2**n


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
    half_width = t_975(n - 1) * stdev / math.sqrt(n)
    return Summary(n, mean, median, stdev, float(half_width))


# ------------------------------------------------ an interval that a few wild values cannot widen
#
# Samples from another site are checked for plausibility first (launch.analysis.compare); within
# that range a value can still be wild, and a mean's interval follows it: two wild values make it
# span every candidate. So, for compare's figures (`robust`):
#   - fewer than MIN_INTERVAL_SAMPLES samples: the median, no interval (nothing to estimate a
#     spread from that two values do not make up);
#   - no sample farther from the median than OUTLIER_MADS scaled MADs (Hampel's identifier: the
#     median absolute deviation x MAD_SCALE estimates a normal sample's standard deviation, and
#     the median's own scale is not moved by a minority of wild values): the mean and its
#     Student-t interval, what the run itself reports;
#   - otherwise the median with its distribution-free interval (order statistics: true for any
#     continuous distribution), where its ends lie at least MEDIAN_INTERVAL_K values in from each
#     end of the sorted samples (n >= 12 at 95 %); with fewer samples, no interval.
# Either way an interval that reaches zero is none (throughput, bandwidth and time are positive).
# From 5 samples up two wild values are a minority: they are outliers by the others' scale and
# widen nothing; below 5 they are half the samples or more, which no estimator tells from the run.
MIN_INTERVAL_SAMPLES = 3
OUTLIER_MADS = 3.0
MAD_SCALE = 1.4826
MEDIAN_INTERVAL_K = 3  # the interval's ends: two wild values on one side cannot reach them


@dataclass(frozen=True)
class Robust:
    value: float  # the mean where no sample is an outlier, else the median
    ci95: float | None  # half-width of its 95 % interval (the wider side of the median's), or None
    method: str  # how, in words


def outliers(samples: list[float]) -> list[float]:
    """The samples farther from the median than OUTLIER_MADS scaled MADs (with a MAD of 0: any
    sample that differs from the median)."""
    median = statistics.median(samples)
    mad = statistics.median(abs(s - median) for s in samples) * MAD_SCALE
    return [s for s in samples if abs(s - median) > OUTLIER_MADS * mad]


def median_interval(samples: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free interval of the median: the k-th smallest and k-th largest sample, k the
    largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2; None where k < MEDIAN_INTERVAL_K."""
    n, tail = len(samples), (1 - confidence) / 2
    k = 0
    while k <= n and _binomial_half_cdf(k, n) <= tail:
        k += 1  # k - 1: the largest j with P(X <= j) <= tail
    if k < MEDIAN_INTERVAL_K:
        return None
    ordered = sorted(samples)
    return ordered[k - 1], ordered[n - k]


def robust(samples: list[float]) -> Robust:
    """A figure and its 95 % interval that a minority of wild samples cannot widen (see above);
    the samples are finite and plausible (the caller checks them)."""
    if not samples:
        raise ValueError("no samples to summarize")
    median = statistics.median(samples)
    if len(samples) < MIN_INTERVAL_SAMPLES:
        return Robust(median, None, f"median of {len(samples)}, no interval (fewer than {MIN_INTERVAL_SAMPLES})")
    if not outliers(samples):
        summary = summarize(samples)
        return _positive(summary.mean, summary.ci95, "mean, Student t")
    interval = median_interval(samples)
    if interval is None:
        return Robust(median, None, f"median: outliers, and too few samples ({len(samples)}) for its interval")
    return _positive(median, max(median - interval[0], interval[1] - median), "median, order statistics")


def _positive(value: float, ci95: float, method: str) -> Robust:
    if not math.isfinite(ci95) or ci95 >= abs(value):
        return Robust(value, None, f"{method}: its interval reaches zero, none")
    return Robust(value, ci95, method)
