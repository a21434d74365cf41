import math

import pytest

from launch.predict.model import AlphaBeta, fit, predict_training


def rows_from(alpha_s, beta_s_per_byte, ranks, sizes):
    truth = AlphaBeta(alpha_s, beta_s_per_byte, ranks)
    return [{"bytes": s, "time_us": truth.allreduce_s(s) * 1e6} for s in sizes]


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_fit_recovers_known_alpha_and_beta(ranks):
    alpha, beta = 25e-6, 8 / 1e9  # 25 us, 1 Gbit/s
    sizes = [8 * 2**k for k in range(0, 24)]
    model = fit(rows_from(alpha, beta, ranks, sizes), ranks)
    assert model.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert model.beta_s_per_byte == pytest.approx(beta, rel=1e-9)
    assert model.bandwidth_gbit_s == pytest.approx(1.0, rel=1e-9)


def test_fit_tolerates_noise_and_clamps_negative_latency():
    sizes = [2**k for k in range(10, 27)]
    noisy = [
        {"bytes": r["bytes"], "time_us": r["time_us"] * (1.03 if i % 2 else 0.97)}
        for i, r in enumerate(rows_from(50e-6, 8 / 5e9, 2, sizes))
    ]
    model = fit(noisy, 2)
    assert model.bandwidth_gbit_s == pytest.approx(5.0, rel=0.05)
    assert model.alpha_s == pytest.approx(50e-6, rel=0.5)
    no_latency = fit(rows_from(0.0, 8 / 1e9, 2, sizes[:3]) + [{"bytes": 2**20, "time_us": 8.0e3}], 2)
    assert no_latency.alpha_s >= 0


def test_fit_needs_two_sizes_and_two_ranks():
    with pytest.raises(ValueError):
        fit([{"bytes": 1024, "time_us": 10.0}], 2)
    with pytest.raises(ValueError):
        fit(rows_from(1e-6, 1e-9, 2, [8, 16]), 1)


def test_ring_allreduce_formula():
    model = AlphaBeta(alpha_s=1e-5, beta_s_per_byte=1e-9, ranks=4)
    assert model.allreduce_s(1e6) == pytest.approx(2 * 3 * 1e-5 + 2 * 3 / 4 * 1e6 * 1e-9)
    assert model.allreduce_s(1e6, ranks=1) == 0.0


def test_training_prediction_adds_allreduce_to_compute():
    model = AlphaBeta(alpha_s=0.0, beta_s_per_byte=8 / 1e9, ranks=2)  # 1 Gbit/s
    train = {
        "world_size": 2,
        "spec": {"batch_size": 32},
        "compute_img_per_s": 200.0,  # 100 per rank
        "gradient_bytes": 50_000_000,
        "throughput": {"per_rank_img_per_s": 40.0},
    }
    p = predict_training(model, train)
    assert p["compute_step_s"] == pytest.approx(0.32)
    assert p["predicted_allreduce_s"] == pytest.approx(0.4)  # 2*(1/2)*50 MB at 125 MB/s
    assert p["predicted_step_s"] == pytest.approx(0.72)
    assert p["measured_step_s"] == pytest.approx(0.8)
    assert p["predicted_scaling_efficiency"] == pytest.approx(0.32 / 0.72)
    baseline = {"throughput": {"total_img_per_s": 80.0}}
    assert predict_training(model, train, baseline)["measured_scaling_efficiency"] == pytest.approx(0.5)
    assert math.isfinite(p["predicted_over_measured"])


def test_fit_can_leave_out_messages_within_the_shaper_burst():
    sizes = [2**k for k in range(16, 27)]
    rows = rows_from(20e-6, 8 / 1e9, 2, sizes)
    for row in rows:  # tbf passes messages within its burst faster than the rate
        if row["bytes"] <= 2**19:
            row["time_us"] /= 10
    assert fit(rows, 2, min_bytes=2**21).bandwidth_gbit_s == pytest.approx(1.0, rel=1e-6)
    assert fit(rows, 2).bandwidth_gbit_s != pytest.approx(1.0, rel=0.05)
