"""The warm-up found in a training run's steps is left out of its figures (launch.kinds.train with
bench.steady_state): the result records the cut, keeps every sample, its throughput is the steady
steps' mean, the aggregation and the steadiness read the same steps, and a cut that its samples do
not give is a disagreement."""

from __future__ import annotations

import pytest

from launch.disturbance import judge
from launch.analysis import aggregate
from launch.results import result
from launch.results.assemble import assemble

WARM = [40.0, 55.0, 70.0, 85.0]  # a warm-up that is still speeding up
STEADY = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.0, 100.4, 99.6, 100.1, 99.9, 100.3, 99.7, 100.0, 100.0]


def records(per_rank: list[float]) -> list[dict]:
    return [
        {
            "kind": "train",
            "rank": rank,
            "host": "h",
            "samples_img_per_s": per_rank,
            "compute_samples_img_per_s": [2 * s for s in per_rank],
            "params_max_abs_diff": 0.0,
            "params_sha256": "x",
            "config": {"batch_size": 8},
            "gradient_bytes": 1000,
        }
        for rank in (0, 1)
    ]


def assembled(series: list[float]) -> dict:
    spec = {
        "benchmark": "train",
        "framework": "torch",
        "engine": "ddp",
        "model": "resnet18",
        "ranks": 2,
        "nodes": 1,
        "iters": len(series),
    }
    return assemble(
        run_id="r", spec=spec, argv=["x"], env={}, records=records(series), exit_code=0, log_tail=[], seconds=1.0
    )


def test_a_training_result_leaves_its_warm_up_out_of_its_figures_and_keeps_every_sample():
    run = assembled(WARM + STEADY)
    steady = run["steady_state"]
    assert steady["warmup_steps_cut"] >= len(WARM) and steady["steps"] == 20 and steady["rule"].startswith("MSER-")
    cut = steady["warmup_steps_cut"]
    totals = [2 * s for s in WARM + STEADY]
    assert run["samples"]["total_img_per_s"] == totals  # kept whole
    assert run["throughput"]["total_img_per_s"] == pytest.approx(sum(totals[cut:]) / len(totals[cut:]))
    assert run["throughput"]["n_samples"] == 20 - cut
    assert result.malformed(run) is None and result.disagreements(run) == []
    assert aggregate.run_samples(run) == totals[cut:]
    # the steadiness is judged on the same steps: the warm-up makes no run unsteady
    steps = judge.steps_signal(run)
    assert steps["verdict"] == "steady" and steps["warmup_steps_cut"] == cut and steps["steps"] == 20 - cut
    assert judge.steps_signal({**run, "steady_state": None})["verdict"] == "unsteady"  # every step judged


def test_a_cut_its_samples_do_not_give_is_a_disagreement():
    run = assembled(WARM + STEADY)
    edited = {**run, "steady_state": {**run["steady_state"], "warmup_steps_cut": 0}}
    found = result.disagreements(edited)
    assert any(f.startswith("steady_state.warmup_steps_cut 0 is not what its samples give") for f in found), found
