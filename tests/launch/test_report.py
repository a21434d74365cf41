"""`fabric-bench report`: PNGs and one HTML page whose content equals the results."""

import base64
import json

import pytest

from tests.results import allreduce_result, train_result
from launch.predict import model
from launch.analysis import report
from tests.conftest import fabric_bench

PNG = b"\x89PNG\r\n\x1a\n"


def train(run_id, fabric, ranks, img, ci=2.0, comm=0.2, **extra):
    return train_result(
        run_id,
        img=img,
        ranks=ranks,
        fabric=fabric,
        engine="horovod",
        model="resnet50",
        ci=ci,
        comm=comm,
        spec={"batch_size": 32},
        compute_img_per_s=img * 1.5,
        gradient_bytes=100 * 2**20,
        **extra,
    )


def allreduce(run_id, fabric, link):
    sizes = [
        {"bytes": 2**k, "time_us": 10.0 + 2**k / 1e3, "algbw_gbit_s": k / 2, "busbw_gbit_s": float(k)}
        for k in (10, 16, 22)
    ]
    return allreduce_result(run_id, sizes=sizes, fabric=fabric, link_rate_gbit_s=link)


@pytest.fixture
def results_dir(tmp_path):
    runs = [
        train("e1", "ethernet", 1, 50.0),
        train("e2", "ethernet", 2, 80.0, comm=0.4),
        train("e4", "ethernet", 4, 120.0, comm=0.55),
        train("i1", "infiniband", 1, 52.0),
        train("i2", "infiniband", 2, 100.0, comm=0.1),
        train("i2b", "infiniband", 2, 96.0, comm=0.2),  # a repetition: the point is the mean
        train("p2", "omnipath", 2, 90.0, comm=None, alpha_beta={"predicted_step_s": 0.5, "measured_step_s": 0.6}),
        {**train("f2", "ethernet", 2, 1.0), "status": "failed", "reason": "rank 1 died"},
        {"schema_version": 1, "run_id": "odd", "status": "ok"},  # fields absent: left out, no failure
        allreduce("a1", "ethernet", 10.0),
        allreduce("a2", "infiniband", 100.0),
    ]
    for r in runs:
        (tmp_path / "sweep" / "runs" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "sweep" / "runs" / r["run_id"] / "result.json").write_text(json.dumps(r))
    return tmp_path / "sweep"


def series(plot, name):
    return next(s for s in plot["series"] if s["name"] == name)


def test_report_plots_hold_exactly_the_stored_results(results_dir, tmp_path):
    data = report.build([results_dir], tmp_path / "out")
    plots = data["plots"]
    assert set(plots) == {
        "throughput",
        "scaling_efficiency",
        "comm_share",
        "allreduce_busbw",
        "predicted_vs_measured",
        "verdict_ratios",
    }
    tp = plots["throughput"]
    assert tp["xlabel"] == "ranks (GPUs on GPU runs)" and tp["ylabel"] == "throughput (img/s, total)"
    assert series(tp, "ethernet/horovod/resnet50") == {
        "name": "ethernet/horovod/resnet50",
        "x": [1, 2, 4],
        "y": [50.0, 80.0, 120.0],
    }
    assert series(tp, "infiniband/horovod/resnet50")["y"] == [52.0, 98.0]  # mean of the repetition
    assert {s["name"] for s in tp["series"]} == {
        "ethernet/horovod/resnet50",
        "infiniband/horovod/resnet50",
        "omnipath/horovod/resnet50",
    }  # failed run left out
    eff = plots["scaling_efficiency"]
    assert series(eff, "ethernet/horovod/resnet50")["y"] == pytest.approx([1.0, 0.8, 0.6])
    assert "omnipath/horovod/resnet50" not in {s["name"] for s in eff["series"]}  # no 1-rank baseline
    # a 1-rank point has no communication share (issue 13): only the 2- and 4-rank points
    assert series(plots["comm_share"], "ethernet/horovod/resnet50") == {
        "name": "ethernet/horovod/resnet50",
        "x": [2, 4],
        "y": [0.4, 0.55],
    }
    bw = plots["allreduce_busbw"]
    assert bw["xlabel"] == "message size (bytes)" and bw["ylabel"] == "bus bandwidth (Gbit/s)"
    assert series(bw, "ethernet/mpi x2") == {
        "name": "ethernet/mpi x2",
        "x": [1024, 65536, 4194304],
        "y": [10.0, 16.0, 22.0],
    }
    assert series(bw, "link rate 10 Gbit/s")["y"] == [10.0, 10.0]
    assert series(bw, "link rate 100 Gbit/s")["y"] == [100.0, 100.0]
    pred = plots["predicted_vs_measured"]
    fitted = model.fit(allreduce("a1", "ethernet", 10.0)["sizes"], 2)
    expected = [
        model.predict_training(fitted, r) for r in (train("e2", "ethernet", 2, 80.0), train("e4", "ethernet", 4, 120.0))
    ]
    assert series(pred, "measured ethernet/horovod/resnet50") == {
        "name": "measured ethernet/horovod/resnet50",
        "x": [2, 4],
        "y": [p["measured_step_s"] * 1e3 for p in expected],
    }
    assert series(pred, "predicted ethernet/horovod/resnet50")["y"] == pytest.approx(
        [p["predicted_step_s"] * 1e3 for p in expected]
    )
    # no omnipath allreduce to fit on: no prediction (an "alpha_beta" field in a result, which
    # nothing writes, is not read)
    assert "measured omnipath/horovod/resnet50" not in {s["name"] for s in pred["series"]}
    assert pred["ylabel"] == "step time (ms)"
    assert "predicted infiniband/horovod/resnet50" in {s["name"] for s in pred["series"]}
    # the sidecar is what was written
    assert json.loads((tmp_path / "out" / "report_data.json").read_text())["plots"] == plots


def test_pngs_and_a_self_contained_html_page(results_dir, tmp_path):
    proc = fabric_bench("report", str(results_dir), "--output", str(tmp_path / "out"), "--title", "Sweep X")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    page = (out / "report.html").read_text()
    for name in ("throughput", "scaling_efficiency", "comm_share", "allreduce_busbw", "predicted_vs_measured"):
        png = (out / f"{name}.png").read_bytes()
        assert png.startswith(PNG) and len(png) > 10_000
        assert base64.b64encode(png).decode() in page  # embedded, not linked
    assert "<title>Sweep X</title>" in page and 'src="http' not in page
    assert "ethernet/horovod/resnet50" in page and "link rate 100 Gbit/s" in page
    assert "failed: rank 1 died" in page and "<td>120.0</td>" in page


def test_nothing_to_report_is_exit_2(tmp_path):
    proc = fabric_bench("report", str(tmp_path), "--output", str(tmp_path / "out"))
    assert proc.returncode == 2 and "no result.json" in proc.stderr


def test_the_health_table_shows_each_runs_fabric_truth_verdicts(tmp_path):
    from launch.analysis.report import health_table

    runs = [
        {
            "run_id": "a",
            "plausibility": {"verdict": "healthy", "ratio": 0.93},
            "preflight": {"verdict": "ok"},
            "placement": {"verdict": "flagged", "problems": [{"rank": 1, "problem": "shared_cores"}]},
            "stragglers": {"ranks": [{"rank": 1, "excess": 0.5}]},
        },
        {"run_id": "b", "stall": {"hanging_ranks": [3]}},
        {
            "run_id": "c",
            "interruption": {"signal": "SIGTERM"},
            "disturbance": {
                "verdict": "disturbed",
                "causes": [{"signal": "cpu", "words": "other processes used 0.90 of a core during the timed window"}],
            },
        },
    ]
    header, rows = health_table(runs)
    assert rows[0] == ["a", "healthy (0.93)", "ok", "flagged: rank 1: shared_cores", "rank 1 +50%", "-", "not recorded"]
    assert rows[1][-2] == "hanging: rank 3" and rows[2][-2] == "interrupted by SIGTERM"
    assert rows[2][-1] == "disturbed: cpu; other processes used 0.90 of a core during the timed window"
    assert len(header) == len(rows[0])


def test_runs_that_share_one_host_s_cores_are_read_against_the_same_cores():
    from launch.analysis import aggregate
    from launch.analysis.report import runs_table
    from tests.results import train_result

    runs = [
        train_result("one", img=110.6, ranks=1, spec={"nodes": 1}),
        train_result("two", img=111.6, ranks=2, spec={"nodes": 1}),
    ]
    header, rows = runs_table(runs, aggregate.aggregate(runs))
    cell = {row[0]: row[header.index("scaling eff.")] for row in rows}
    assert cell["one"] == "1 (baseline)" and cell["two"] == "0.50 (shared cores: 1.01 of the 1-rank total)"


def test_report_with_the_study_answers_today_s_question_with_ranges(results_dir, tmp_path):
    data = report.build([results_dir], tmp_path / "out", study="hpec2020-today")
    plot = data["plots"]["study_hpec2020-today"]
    assert {s["name"] for s in plot["series"]} >= {"ib-ndr-8x400", "roce-8x400", "tcp-200", "tcp-100"}
    assert len(data["study"]["answer"]) == 4 and all("[" in line for line in data["study"]["answer"])
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="study-hpec2020-today"' in page and "Predicted, not measured" in page and "ASSUMED" in page
    assert data["study"]["answer"][0].split(":")[0] in page


def test_the_message_size_axis_reads_as_plain_text():
    """Math text is off in the report's figures, so a log axis' default ticks ('$2^{10}$') showed raw."""
    from launch.analysis.plots import plot_busbw, size_text

    assert [size_text(v) for v in (8, 1024, 3 * 2**20, 2**33)] == ["8 B", "1 KiB", "3 MiB", "8 GiB"]
    rows = [{"bytes": 2**k, "busbw_gbit_s": 1.0} for k in range(3, 21)]
    fig = plot_busbw([{"sizes": rows, "world_size": 2, "spec": {}}], "t")
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert labels and not any("$" in t for t in labels) and "1 KiB" in labels
