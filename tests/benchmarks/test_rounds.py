"""Ratios from alternating rounds (benchmarks/rounds.py) and how `make bench` prints them
(benchmarks/train_engines.py): the paired CI is the Student-t interval of the per-round log ratios,
it covers a true ratio hidden under a drift that moves both arms alike, a disturbed round is left
out and named, and with too few clean rounds the figure is still printed, marked with the cause."""

from __future__ import annotations

import math
import random

import pytest

from benchmarks import train_engines
from benchmarks.rounds import alternating, paired_ratio
from launch.results.result import Result


def test_the_arms_alternate_and_every_round_runs_each_once():
    order = list(alternating(["a", "b", "c"], 3))
    assert order == [(0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c")]


def test_the_paired_ci_is_the_t_interval_of_the_log_ratios():
    found = paired_ratio([(110.0, 100.0), (99.0, 90.0), (132.0, 110.0)])
    assert found is not None and found.rounds == 3
    logs = [math.log(1.1), math.log(1.1), math.log(1.2)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302653 * sd / math.sqrt(3)  # t(0.975, 2)
    assert found.ratio == pytest.approx(math.exp(mean))
    assert (found.low, found.high) == (pytest.approx(math.exp(mean - half)), pytest.approx(math.exp(mean + half)))
    assert found.text().startswith(f"{math.exp(mean):.2f}, 95 % CI [") and found.text().endswith("(paired, 3 rounds)")
    one = paired_ratio([(1.0, 2.0)])
    assert one is not None and one.low is None and one.text() == "0.50 (one round: no CI)"
    assert paired_ratio([(0.0, 1.0)]) is None


def test_pairing_covers_a_ratio_under_a_drift_and_stays_narrow():
    """The machine slows by 40 % over 6 rounds (both arms alike); a is 1.06 x b with 2 % noise a run:
    in 200 such sittings the paired CI holds 1.06 in at least 90 % and is within ±5 % in most; an
    interval that ignored the pairing (Welch on each arm's log figures) is wider than ±15 %."""
    from scipy import stats

    covered, widths, unpaired = 0, [], []
    for seed in range(200):
        rng = random.Random(seed)
        pairs = []
        for k in range(6):
            machine = 1.0 - 0.08 * k
            pairs.append((106.0 * machine * (1 + rng.gauss(0, 0.02)), 100.0 * machine * (1 + rng.gauss(0, 0.02))))
        found = paired_ratio(pairs)
        assert found is not None and found.low is not None and found.high is not None
        covered += found.low < 1.06 < found.high
        widths.append(found.half_width)
        a, b = [math.log(x) for x, _ in pairs], [math.log(y) for _, y in pairs]
        low, high = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        unpaired.append(math.exp(high) / math.exp((low + high) / 2) - 1)
    assert covered >= 180, covered
    assert sorted(widths)[100] < 0.05 and sorted(unpaired)[100] > 0.15


def run(run_id: str, img: float, disturbed_by: str | None = None, unsteady: bool = False) -> Result:
    causes = [{"signal": disturbed_by.split(":")[0], "words": disturbed_by}] if disturbed_by else []
    return Result(
        {
            "schema_version": 4,
            "run_id": run_id,
            "benchmark": "train",
            "framework": "torch",
            "engine": "ddp",
            "world_size": 1,
            "status": "ok",
            "throughput": {"total_img_per_s": img},
            "disturbance": {
                "verdict": "disturbed" if disturbed_by else "clean",
                "causes": causes,
                "steadiness": "unsteady" if unsteady else "steady",
            },
        }
    )


def test_a_disturbed_round_is_left_out_and_named_and_the_figure_still_shows():
    pairs = [
        (0, run("a0", 105.0), run("b0", 100.0)),
        (1, run("a1", 104.0), run("b1", 50.0, disturbed_by="cpu: other processes used 0.9 of a core")),
        (2, run("a2", 106.0, unsteady=True), run("b2", 100.0)),
    ]
    line = train_engines.paired_figure("torch x1: horovod/ddp throughput ratio", pairs)
    assert line is not None and not line.marked
    assert line.data["per_round"] == [pytest.approx(1.05), pytest.approx(1.06)]  # round 2 left out
    assert line.text.startswith("torch x1: horovod/ddp throughput ratio 1.05, 95 % CI [")
    assert "; 1 unsteady run kept" in line.text
    assert "round 2 left out: torch ddp x1 (b1) was disturbed: cpu: other processes used 0.9 of a core" in line.text
    assert line.data["rounds_left_out"] == [2]


def test_with_too_few_clean_rounds_the_figure_is_read_from_every_round_and_marked():
    pairs = [
        (
            0,
            run("a0", 105.0),
            run("b0", 100.0, disturbed_by="io: some task waited on storage 30 % of the timed window"),
        ),
        (1, run("a1", 104.0), run("b1", 100.0)),
    ]
    line = train_engines.paired_figure("ratio", pairs)
    assert line is not None and line.marked
    assert line.data["per_round"] == [pytest.approx(1.05), pytest.approx(1.04)]
    assert "[disturbed: fewer than 2 clean rounds, read from every round; by round 1 torch ddp x1: io" in line.text
    assert "95 % CI [" in line.text
