import math

import pytest

from bench.stats import summarize


def test_summary_of_known_samples():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s.n == 5 and s.mean == 3.0 and s.median == 3.0
    assert s.stdev == pytest.approx(math.sqrt(2.5))
    # t(0.975, 4) = 2.7764451
    assert s.ci95 == pytest.approx(2.7764451 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)


def test_ci_shrinks_with_more_samples():
    few = summarize([10.0, 12.0, 11.0, 13.0])
    many = summarize([10.0, 12.0, 11.0, 13.0] * 10)
    assert many.ci95 < few.ci95


def test_single_sample_has_unbounded_ci_and_empty_is_an_error():
    assert math.isinf(summarize([7.0]).ci95)
    with pytest.raises(ValueError):
        summarize([])


def test_the_t_quantile_is_scipy_s_to_double_precision_without_importing_scipy():
    """bench.stats computes Student's t 97.5 % quantile itself (a rank never imports scipy for it):
    within 1e-12 of scipy's for every df to 1000; a fresh interpreter's summary loads no scipy."""
    import subprocess
    import sys

    from scipy import stats as scipy_stats

    from bench import stats

    worst = max(abs(stats.t_975(df) / float(scipy_stats.t.ppf(0.975, df)) - 1) for df in range(1, 1001))
    assert worst < 1e-12
    with pytest.raises(ValueError):
        stats.t_975(0)
    probe = "import sys; from bench.stats import summarize; summarize([1.0, 2.0, 4.0]); print('scipy' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "False", loaded.stderr


def test_the_median_interval_s_order_statistic_is_the_binomial_one():
    from scipy import stats as scipy_stats

    from bench import stats

    for n in range(3, 80):
        k = int(scipy_stats.binom.ppf(0.025, n, 0.5))
        k += scipy_stats.binom.cdf(k, n, 0.5) <= 0.025
        interval = stats.median_interval(list(range(n)))
        assert interval == ((k - 1, n - k) if k >= stats.MEDIAN_INTERVAL_K else None), n
