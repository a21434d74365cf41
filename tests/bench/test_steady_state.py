"""bench.steady_state: MSER finds a warm-up of known length in synthetic step series, cuts
nothing from a steady one, and says when a series never settled in its first half."""

from __future__ import annotations

import random

import pytest

from bench.steady_state import BATCH, batch_for, mser, steady_part, steady_state


def noisy(n: int, level: float, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, spread)) for _ in range(n)]


@pytest.mark.parametrize("warmup", [10, 25])
def test_a_warm_up_of_known_length_is_found(warmup):
    """100 steps (MSER-5): `warmup` steps at 60 % of the steady rate, then the steady rate with 3 %
    noise: every seed's cut takes the whole warm-up, and on the mean little more (MSER's minimum
    may fall a few batches later by chance: a cut too late costs samples, one too early a bias)."""
    cuts = []
    for seed in range(20):
        series = noisy(warmup, 60.0, 0.03, seed) + noisy(100 - warmup, 100.0, 0.03, seed + 100)
        found = steady_state(series)
        assert found.batch == BATCH and found.rule == "MSER"
        assert found.warmup_steps_cut >= warmup and min(steady_part(series)) > 80.0, (seed, found)
        cuts.append(found.warmup_steps_cut)
    assert sum(cuts) / len(cuts) < warmup + 2 * BATCH, cuts


def test_a_decaying_warm_up_in_a_short_run_is_cut():
    """A make-bench-sized run: 24 steps, the first 4 slower by a decaying 50 %, 25 %, 12 %, 6 %:
    the two slowest are always cut."""
    cuts = []
    for seed in range(20):
        series = noisy(24, 100.0, 0.02, seed)
        for i, slower in enumerate((0.5, 0.25, 0.12, 0.06)):
            series[i] /= 1 + slower
        found = steady_state(series)
        assert found.batch == batch_for(24) == 2 and found.warmup_steps_cut >= 2, (seed, found)
        cuts.append(found.warmup_steps_cut)
    assert sum(cuts) / len(cuts) < 8, cuts


def test_a_steady_series_keeps_most_of_its_steps():
    cuts = [steady_state(noisy(100, 100.0, 0.05, seed)).warmup_steps_cut for seed in range(40)]
    assert sum(cuts) / len(cuts) < 15 and sorted(cuts)[len(cuts) // 2] <= 2 * BATCH, cuts


def test_a_series_that_never_settles_says_so():
    """A steady slow-down over the whole run: the cut runs to the end of the searched half."""
    series = [100.0 - i for i in range(40)]
    found = steady_state(series)
    assert not found.settled and found.warmup_steps_cut == 20
    assert found.as_dict()["steps_kept"] == 20 and found.as_dict()["rule"] == "MSER-4"


def test_the_rule_itself_on_batch_means():
    # cutting the outlier first batch removes all the spread
    assert mser([10.0, 1.0, 1.0, 1.0]) == pytest.approx([60.75 / 16, 0.0, 0.0])
    assert steady_state([5.0, 5.0, 5.0]).warmup_steps_cut == 0  # too short to cut
    assert steady_state([5.0] * 30).warmup_steps_cut == 0  # nothing to gain: the first minimum
    assert batch_for(50) == 5 and batch_for(49) == 4 and batch_for(5) == 1
