"""Verdicts and the one aggregation behind report, sweep summary and tables (issue 13)."""

import json
import math
import statistics

import pytest
from scipy import stats

from tests.results import train_result
from launch.analysis import aggregate, report, verdict
from launch.errors import UsageError


def train(
    run_id, fabric, ranks, samples, nodes=None, comm=0.3, engine="ddp", allreduce=None, gpudirect=None, model="resnet18"
):
    spec = {
        "fabric": fabric,
        "batch_size": 8,
        "image_size": 32,
        "precision": "fp32",
        "nodes": nodes or ranks,
        "ranks": ranks,
        "allreduce": allreduce,
        "gpudirect": gpudirect,
        "launcher": "emulated" if fabric else "local",
    }
    mean = statistics.fmean(samples)
    return train_result(
        run_id,
        img=mean,
        ranks=ranks,
        fabric=fabric,
        engine=engine,
        model=model,
        comm=comm,
        spec=spec,
        samples=samples,
        compute_img_per_s=mean * 1.2,
        gradient_bytes=46_000_000,
    )


FAST = [100.0, 104.0, 98.0, 101.0, 103.0]
SLOW = [60.0, 63.0, 59.0, 61.0, 62.0]


def emulated_sweep():
    """Two link rates as two fabrics x nodes 1, 2 x ddp, horovod; the 1-node points are the
    fabric-less baselines a sweep adds."""
    out = []
    for engine in ("ddp", "horovod"):
        out.append(train(f"base-{engine}", None, 1, [50.0, 52.0, 51.0, 49.0], comm=0.22, engine=engine))
        out.append(train(f"fast-{engine}", "emu-eth-10g", 2, FAST, engine=engine))
        out.append(train(f"slow-{engine}", "emu-eth-1g", 2, SLOW if engine == "ddp" else FAST, engine=engine))
    return out


def test_one_repetition_per_side_is_welchs_t_on_log_throughput():
    points = aggregate.aggregate(emulated_sweep())
    data = verdict.verdicts(points, "fabric", order=["emu-eth-10g", "emu-eth-1g"])
    rows = {r["engine"]: r for r in data["rows"]}
    assert set(rows) == {"ddp", "horovod"} and data["reference"] == "emu-eth-10g"
    ddp = rows["ddp"]
    welch = stats.ttest_ind([math.log(x) for x in SLOW], [math.log(x) for x in FAST], equal_var=False)
    low, high = welch.confidence_interval(0.95)
    assert ddp["ci95"] == pytest.approx([math.exp(low), math.exp(high)], rel=1e-9)
    geo = math.exp(statistics.fmean(map(math.log, SLOW)) - statistics.fmean(map(math.log, FAST)))
    assert ddp["ratio"] == pytest.approx(geo)
    assert ddp["significant"] and ddp["verdict"] == f"{(1 - geo) * 100:.1f} % slower"
    assert ddp["reference_mean"] == pytest.approx(statistics.fmean(FAST))
    assert ddp["mean"] == pytest.approx(statistics.fmean(SLOW))
    same = rows["horovod"]  # identical samples on both fabrics
    assert same["ratio"] == pytest.approx(1.0) and same["verdict"] == "no significant difference"
    words = data["paragraph"]
    assert words.startswith(
        "In the 2 groups where both ran, emu-eth-1g is significantly slower than emu-eth-10g in 1 of 2 (by "
        f"{(1 - geo) * 100:.1f} %, resnet18 at 2 nodes, ddp) and not significantly different in 1 of 2 (the ratio's "
        "95 % CI holds 1); within ±2 % of it in 1 of 2. "
    )


def test_repetitions_aggregate_into_one_point_with_the_larger_of_both_variances():
    reps = [[100.0, 101.0, 99.0], [110.0, 111.0, 109.0]]  # the runs disagree far more than their iterations
    results = [train(f"r{i}", "ethernet", 2, s) for i, s in enumerate(reps)]
    (point,) = aggregate.aggregate(results)
    assert point.repetitions == 2 and point.n_samples == 6
    assert point.mean == pytest.approx(105.0)
    between = statistics.variance([100.0, 110.0]) / 2
    assert point.ci95 == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(between))
    assert point.describe()["repetition_values"] == [100.0, 110.0]


def test_baseline_joins_every_fabric_series_and_one_rank_has_no_comm_share():
    results = emulated_sweep() + [train("base-ddp-2", None, 1, [54.0, 52.0, 53.0], comm=0.29)]
    points = aggregate.aggregate(results)
    curves = aggregate.curves(points)
    assert set(curves) == {
        "emu-eth-10g/ddp/resnet18",
        "emu-eth-1g/ddp/resnet18",
        "emu-eth-10g/horovod/resnet18",
        "emu-eth-1g/horovod/resnet18",
    }  # the baseline is no curve of its own
    slow = curves["emu-eth-1g/ddp/resnet18"]
    assert [p.ranks for p in slow] == [1, 2]
    one = slow[0]
    assert one.repetitions == 2 and one.efficiency == 1.0 and one.comm_fraction is None
    base_mean = statistics.fmean([statistics.fmean([50.0, 52.0, 51.0, 49.0]), 53.0])
    assert one.mean == pytest.approx(base_mean)
    assert slow[1].efficiency == pytest.approx(statistics.fmean(SLOW) / (2 * base_mean))
    assert slow[1].comm_fraction == 0.3
    # the runs table and the sweep summary divide by the same aggregated baseline
    run = next(r for r in results if r["run_id"] == "slow-ddp")
    assert aggregate.point_of(points, run).run_efficiency(run) == pytest.approx(slow[1].efficiency)


def test_knob_verdicts_only_where_the_results_varied_them():
    results = [
        train("nccl", "omnipath", 4, FAST, nodes=2, allreduce="nccl", gpudirect="on"),
        train("mpi", "omnipath", 4, SLOW, nodes=2, allreduce="mpi", gpudirect="on"),
        train("eth", "ethernet", 4, FAST, nodes=2, allreduce="nccl", gpudirect="on"),
    ]
    judged = verdict.all_verdicts(
        aggregate.aggregate(results), orders={"fabric": ["ethernet", "omnipath"], "allreduce": ["nccl", "mpi"]}
    )
    assert set(judged) == {"fabric", "allreduce"}  # GPUDirect was not varied
    (row,) = judged["allreduce"]["rows"]
    assert (row["reference"], row["value"], row["fabric"], row["nodes"], row["ranks_per_node"]) == (
        "nccl",
        "mpi",
        "omnipath",
        2,
        2,
    )
    assert row["verdict"].endswith("% slower")
    (fabric_row,) = judged["fabric"]["rows"]
    assert fabric_row["reference"] == "ethernet" and fabric_row["verdict"] == "no significant difference"


def test_nvls_on_and_off_are_two_series_and_an_axis_of_their_own():
    """NCCL's in-switch reductions asked on and off (--nvls, --sharp) are not pooled into one point:
    each is its own series, an axis of verdicts where varied, and a column only where set."""
    runs = []
    for fabric in ("infiniband", "ethernet"):
        for nvls, samples in (("on", FAST), ("off", SLOW)):
            run = train(f"{fabric}-{nvls}", fabric, 4, samples, nodes=2, allreduce="nccl")
            run["spec"]["nvls"] = nvls
            runs.append(run)
    points = aggregate.aggregate(runs)
    assert len(points) == 4 and "infiniband/ddp/resnet18 (nccl, nvls-on)" in {
        aggregate.series_name(p.first) for p in points
    }
    judged = verdict.all_verdicts(points, orders={"fabric": ["ethernet"], "nvls": ["off", "on"]})
    assert set(judged) == {"fabric", "nvls"}  # SHARP was not varied
    assert {(r["fabric"], r["reference"], r["value"]) for r in judged["nvls"]["rows"]} == {
        ("infiniband", "off", "on"),
        ("ethernet", "off", "on"),
    }
    assert all(r["verdict"].endswith("% faster") for r in judged["nvls"]["rows"])
    # the fabric verdict compares like with like: NVLS on with on, off with off
    assert sorted(r["nvls"] for r in judged["fabric"]["rows"]) == ["off", "on"]
    header = verdict.table_rows(judged["fabric"])[0]
    assert "nvls" in header and "sharp" not in header  # a column only where a row set it
    assert "nvls" not in verdict.table_rows(judged["nvls"])[0]  # the compared axis


def test_nothing_to_compare_is_said_not_failed(tmp_path):
    results = [r for r in emulated_sweep() if r["spec"]["fabric"] != "emu-eth-1g"]
    data = verdict.verdicts(aggregate.aggregate(results), "fabric")
    assert data["rows"] == [] and data["nothing_to_compare"].startswith("nothing to compare")
    assert "emu-eth-10g" in data["paragraph"]
    for r in results:
        (tmp_path / "in" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "in" / r["run_id"] / "result.json").write_text(json.dumps(r))
    built = report.build([tmp_path / "in"], tmp_path / "out")
    assert built["verdicts"]["fabric"]["rows"] == [] and "verdict_ratios" not in built["plots"]
    assert "nothing to compare" in (tmp_path / "out" / "report.html").read_text().lower()


def test_report_opens_with_the_verdicts_and_its_numbers_are_the_results(tmp_path):
    for r in emulated_sweep():
        (tmp_path / "in" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "in" / r["run_id"] / "result.json").write_text(json.dumps(r))
    data = report.build([tmp_path / "in"], tmp_path / "out", baseline_fabric="emu-eth-10g")
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.index('id="verdict-fabric"') < page.index("<h2>Plots</h2>")
    stored = json.loads((tmp_path / "out" / "report_data.json").read_text())
    rows = {r["engine"]: r for r in stored["verdicts"]["fabric"]["rows"]}
    assert rows["ddp"]["mean"] == pytest.approx(statistics.fmean(SLOW))
    assert rows["ddp"]["reference_mean"] == pytest.approx(statistics.fmean(FAST))
    assert rows["ddp"]["runs"] == ["slow-ddp"] and rows["ddp"]["reference_runs"] == ["fast-ddp"]
    ratios = data["plots"]["verdict_ratios"]
    assert {s["name"] for s in ratios["series"]} == {"emu-eth-1g vs emu-eth-10g"}
    assert sorted(ratios["series"][0]["x"]) == pytest.approx(sorted(r["speed_ratio"] for r in rows.values()))
    tp = data["plots"]["throughput"]
    assert {s["name"]: s["x"] for s in tp["series"]}["emu-eth-1g/ddp/resnet18"] == [1.0, 2.0]
    ideal = {s["name"]: s for s in tp["ideal"]}["emu-eth-1g/ddp/resnet18"]
    assert ideal["y"] == pytest.approx([50.5, 101.0])  # N x the 1-rank throughput
    eff = {s["name"]: s for s in data["plots"]["scaling_efficiency"]["series"]}
    assert eff["emu-eth-1g/ddp/resnet18"]["y"] == pytest.approx([1.0, statistics.fmean(SLOW) / 101.0])
    comm = {s["name"]: s for s in data["plots"]["comm_share"]["series"]}
    assert comm["emu-eth-1g/ddp/resnet18"]["x"] == [2.0]  # never a 1-rank point
    with pytest.raises(UsageError, match="--baseline-fabric infiniband: no multi-rank results"):
        report.build([tmp_path / "in"], tmp_path / "out2", baseline_fabric="infiniband")


def test_halo_verdicts_compare_time_per_iteration_lower_is_faster():
    def halo(run_id, fabric, times):
        return {
            "schema_version": 1,
            "run_id": run_id,
            "benchmark": "halo",
            "world_size": 4,
            "status": "ok",
            "spec": {"fabric": fabric, "nodes": 2, "grid": 96},
            "samples_s": times,
            "time_per_iter_s": statistics.median(times),
            "time_per_iter_mean_s": statistics.fmean(times),
        }

    results = [
        halo("h-opa", "omnipath", [0.010, 0.011, 0.010, 0.0105]),
        halo("h-eth", "ethernet", [0.020, 0.021, 0.020, 0.0205]),
    ]
    (row,) = verdict.verdicts(aggregate.aggregate(results), "fabric", order=["omnipath", "ethernet"])["rows"]
    assert row["metric"] == "time_per_iter_s" and row["model"] == "halo 96^3"
    assert row["ratio"] > 1.9 and row["speed_ratio"] < 0.53 and row["verdict"].endswith("% slower")


def test_the_default_reference_is_the_first_fabric_of_the_sweeps_experiment(tmp_path):
    for r in emulated_sweep():
        (tmp_path / "in" / "runs" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "in" / "runs" / r["run_id"] / "result.json").write_text(json.dumps(r))
    (tmp_path / "in" / "summary.json").write_text(
        json.dumps({"experiment_file": "gone.toml", "verdict_orders": {"fabric": ["emu-eth-1g", "emu-eth-10g"]}})
    )
    assert verdict.experiment_orders([tmp_path / "in"]) == {"fabric": ["emu-eth-1g", "emu-eth-10g"]}
    data = report.build([tmp_path / "in"], tmp_path / "out")
    assert data["verdicts"]["fabric"]["reference"] == "emu-eth-1g"
    assert {r["value"] for r in data["verdicts"]["fabric"]["rows"]} == {"emu-eth-10g"}


def _row(value, speed, significant, ci=True, model="allreduce", engine="mpi", nodes=4):
    return {
        "value": value,
        "reference": "emu-eth-1g",
        "speed_ratio": speed,
        "significant": significant,
        "ci95": [speed * 0.9, speed * 1.1] if ci else None,
        "model": model,
        "nodes": nodes,
        "engine": engine,
    }


@pytest.mark.parametrize(
    "rows, expected",
    [
        # the case: two groups, both significantly faster, none within ±2 %
        (
            [_row("emu-eth-5g", 4.401, True), _row("emu-eth-5g", 2.5, True, nodes=2)],
            "In the 2 groups where both ran, emu-eth-5g is significantly faster than emu-eth-1g in both (by up to "
            "340.1 %, allreduce at 4 nodes, mpi); within ±2 % of it in none. For this data, fabric emu-eth-5g changes "
            "performance significantly in both groups.",
        ),
        (
            [_row("emu-eth-5g", 1.3, True)],
            "In the one group where both ran, emu-eth-5g is significantly faster than emu-eth-1g (by 30.0 %, allreduce "
            "at 4 nodes, mpi), not within ±2 % of it. For this data, fabric emu-eth-5g changes performance "
            "significantly.",
        ),
        (
            [_row("emu-eth-5g", 1.01, False)],
            "In the one group where both ran, emu-eth-5g is not significantly different from emu-eth-1g (the ratio's "
            "95 % CI holds 1), within ±2 % of it. For this data, fabric emu-eth-5g vs emu-eth-1g has no significant "
            "effect.",
        ),
        (
            [
                _row("emu-eth-5g", 1.01, False),
                _row("emu-eth-5g", 0.7, True, nodes=2),
                _row("emu-eth-5g", 1.0, False, False),
            ],
            "In the 3 groups where both ran, emu-eth-5g is significantly slower than emu-eth-1g in 1 of 3 (by 30.0 %, "
            "allreduce at 2 nodes, mpi), not significantly different in 1 of 3 (the ratio's 95 % CI holds 1) and "
            "without a CI in 1 of 3 (one sample per side); within ±2 % of it in 2 of 3. For this data, fabric "
            "emu-eth-5g changes performance significantly in 1 of 3 groups.",
        ),
    ],
)
def test_the_verdict_sentence_reads_right_for_one_group_or_many(rows, expected):
    data = {
        "nothing_to_compare": None,
        "values": ["emu-eth-5g"],
        "rows": rows,
        "within": verdict.WITHIN,
        "title": "fabric",
    }
    assert verdict.paragraph(data) == expected


DISTURBED = {
    "verdict": "disturbed",
    "causes": [{"signal": "cpu", "words": "other processes used 0.90 of a core during the timed window (12.0 s)"}],
}


def test_a_disturbed_run_is_left_out_of_its_point_and_the_verdict_says_how_many_and_why():
    runs = emulated_sweep()
    # a disturbed slow-link repetition that, kept, would make the 1g link look as fast as 10g
    noisy = train("slow-ddp-noisy", "emu-eth-1g", 2, FAST)
    runs.append({**noisy, "disturbance": DISTURBED})
    points = aggregate.aggregate(runs)
    slow = next(p for p in points if p.fabric == "emu-eth-1g" and p.first["engine"] == "ddp")
    assert [r["run_id"] for r in slow.runs] == ["slow-ddp"] and not slow.disturbed
    assert slow.left_out == [{"run_id": "slow-ddp-noisy", "causes": [DISTURBED["causes"][0]["words"]]}]
    data = verdict.verdicts(points, "fabric", order=["emu-eth-10g", "emu-eth-1g"])
    row = next(r for r in data["rows"] if r["engine"] == "ddp")
    assert row["significant"] and row["speed_ratio"] < 0.7 and len(row["left_out"]) == 1
    assert "1 disturbed run was left out (other processes used 0.90 of a core)" in data["paragraph"]
    # kept on request: the same repetition pulls the 1g point up
    kept = aggregate.aggregate(runs, keep_disturbed=True)
    kept_slow = next(p for p in kept if p.fabric == "emu-eth-1g" and p.first["engine"] == "ddp")
    assert kept_slow.repetitions == 2 and kept_slow.mean > slow.mean


def test_a_side_with_only_disturbed_runs_cannot_tell():
    runs = [r if r["run_id"] != "slow-ddp" else {**r, "disturbance": DISTURBED} for r in emulated_sweep()]
    points = aggregate.aggregate(runs)
    data = verdict.verdicts(points, "fabric", order=["emu-eth-10g", "emu-eth-1g"])
    row = next(r for r in data["rows"] if r["engine"] == "ddp")
    assert row["verdict"].startswith(
        "cannot tell: every compared run was disturbed (the run was disturbed (slow-ddp: other processes used 0.90"
    )
    assert row["significant"] is False
    assert "In 1 group it cannot tell: a side had only disturbed runs (emu-eth-1g vs emu-eth-10g)" in data["paragraph"]
    slow = next(p for p in points if p.fabric == "emu-eth-1g" and p.first["engine"] == "ddp")
    assert slow.disturbed and slow.describe()["unreadable_because"].startswith("the run was disturbed")


def test_an_efficiency_on_a_disturbed_baseline_cannot_be_read():
    runs = [r if r["run_id"] != "base-ddp" else {**r, "disturbance": DISTURBED} for r in emulated_sweep()]
    points = aggregate.aggregate(runs)
    fast = next(p for p in points if p.fabric == "emu-eth-10g" and p.first["engine"] == "ddp")
    assert fast.efficiency is not None
    assert fast.unreadable_because.startswith("the 1-rank baseline was disturbed (base-ddp: other processes")
    header, rows = report.points_table(points)
    cell = next(row for row in rows if row[0] == fast.series)[header.index("scaling eff.")]
    assert "cannot be read: the 1-rank baseline was disturbed" in cell
