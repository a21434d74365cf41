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


def test_without_scipy_the_t_table_is_within_its_stated_error(monkeypatch):
    """A bare GPU host has torch and little else: bench.stats falls back to the printed t table
    (linear in 1/df between rows), within 0.002 of scipy's exact quantile for every df."""
    import builtins

    from scipy import stats as scipy_stats

    from bench import stats

    exact = {df: float(scipy_stats.t.ppf(0.975, df)) for df in range(1, 1001)}
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.split(".")[0] == "scipy":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    assert max(abs(stats.t_975(df) - exact[df]) for df in exact) < 0.002
    assert stats.t_975(9) == 2.262  # a table row as printed


def test_the_median_interval_s_order_statistic_is_the_binomial_one():
    from scipy import stats as scipy_stats

    from bench import stats

    for n in range(3, 80):
        k = int(scipy_stats.binom.ppf(0.025, n, 0.5))
        k += scipy_stats.binom.cdf(k, n, 0.5) <= 0.025
        interval = stats.median_interval(list(range(n)))
        assert interval == ((k - 1, n - k) if k >= stats.MEDIAN_INTERVAL_K else None), n
