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
