"""Headlines that know when they are wrong (launch.analysis.headline): a ratio on a disturbed
run names it instead of a number; an impossible same-cores efficiency is flagged."""

from launch.analysis import headline
from launch.results.result import Result
from tests.results import train_result

DISTURBED = {
    "verdict": "disturbed",
    "causes": [{"signal": "cpu", "words": "other processes used 0.90 of a core during the timed window (9.0 s)"}],
}


def test_a_ratio_on_a_disturbed_run_names_it_and_is_not_printed():
    one = Result({**train_result("one-rank", img=62.3, ranks=1, engine="horovod"), "disturbance": DISTURBED})
    two = Result(
        {
            **train_result("two-rank", img=147.2, ranks=2, engine="horovod"),
            "disturbance": {"verdict": "clean", "causes": []},
        }
    )
    line = headline.ratio_line("torch horovod x2: same-cores efficiency", 147.2 / 62.3, [two, one])
    assert "2.36" not in line
    assert line == (
        "torch horovod x2: same-cores efficiency cannot be read: torch horovod x1 (one-rank) was "
        "disturbed: other processes used 0.90 of a core during the timed window (9.0 s)"
    )
    assert headline.ratio_line("ratio", 0.97, [two]) == "ratio 0.97"
    assert headline.ratio_line("ratio", 0.97, [train_result("old", img=1.0)]) == "ratio 0.97"  # not recorded


def test_an_impossible_same_cores_efficiency_is_flagged_and_a_plausible_one_is_not():
    assert headline.impossible_same_cores(1.18, 2) is None
    assert headline.impossible_same_cores(None, 2) is None
    flagged = headline.impossible_same_cores(2.36, 2)
    assert flagged.startswith("same-cores efficiency 2.36 is impossible: 2 ranks on the cores of one")


def test_the_disturbance_line_says_clean_disturbed_or_not_recorded():
    assert headline.disturbance_line({"disturbance": {"verdict": "clean", "causes": []}}) == "disturbance: clean"
    assert headline.disturbance_line({}) == "disturbance: not recorded"
    assert headline.disturbance_line({"disturbance": DISTURBED}) == (
        "disturbance: disturbed: cpu (other processes used 0.90 of a core during the timed window (9.0 s))"
    )
