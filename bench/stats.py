"""Summary statistics for per-iteration samples (mean, median, 95 % CI), and an interval that a
few wild samples cannot widen (`robust`, for figures read from another site's results)."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass


def _t_central(theta: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer `df`, at theta = atan(t / sqrt(df)): the closed
    forms of Abramowitz and Stegun 26.7.3 (odd df) and 26.7.4 (even df), finite sums in cos(theta)."""
    cos2, sin = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:  # sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
        term = total = 1.0
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * cos2
            total += term
        return sin * total
    term = total = math.cos(theta)  # (2/pi)(theta + sin(theta)(cos + 2/3 cos^3 + ... up to cos^(df-2)))
    for k in range(1, (df - 1) // 2):
        term *= 2 * k / (2 * k + 1) * cos2
        total += term
    return 2 / math.pi * (theta + (sin * total if df > 1 else 0.0))


@functools.lru_cache(maxsize=256)
def t_975(df: int) -> float:
    """Student's t 97.5 % quantile with `df` degrees of freedom, exact to double precision: the
    angle where P(|T| < t) is 0.95, by bisection. The standard library's own, so a rank never
    imports scipy for it (0.6 s a process; a bare GPU host has torch and little else)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    low, high = 0.0, math.pi / 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if _t_central(middle, df) < 0.95 else (low, middle)
    return math.sqrt(df) * math.tan((low + high) / 2)


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
