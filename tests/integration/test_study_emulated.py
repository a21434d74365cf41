"""The study's question answered for real, CI-sized: an emulated sweep (two link rates as two
fabrics x 1 and 2 nodes x ddp and horovod) whose report opens with the verdict table and its
paragraph, agreeing with the sweep summary; and the predictor validated on emulated fabrics."""

import json
import math
import os
import shutil
import statistics
import subprocess
import sys

import pytest

from tests.conftest import REPO, fabric_bench, need

pytestmark = pytest.mark.slow


def emulation_possible():
    need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated fabrics need root and tc")


def test_emulated_sweep_report_opens_with_the_verdict(tmp_path, cpu_emulated_sweep):
    # the session's one sweep of experiments/cpu-emulated.experiment.toml (tests/conftest.py), which
    # the README's verdicts page reads too
    sweep_dir, sweep = cpu_emulated_sweep.directory, cpu_emulated_sweep.process
    assert "verdict: fabric" in sweep.stdout and "In the 2 groups" in sweep.stdout.replace("\n", " ")

    out = tmp_path / "report"
    report = fabric_bench("report", str(sweep_dir), "--output", str(out), "--keep-disturbed")
    assert report.returncode == 0, report.stderr
    data = json.loads((out / "report_data.json").read_text())
    fabric = data["verdicts"]["fabric"]
    assert fabric["reference"] == "emu-eth-1g"  # the first fabric of the experiment
    assert {(r["engine"], r["value"], r["nodes"]) for r in fabric["rows"]} == {
        ("ddp", "emu-eth-10g", 2),
        ("horovod", "emu-eth-10g", 2),
    }
    assert fabric["paragraph"].startswith("In the 2 groups where both ran, emu-eth-10g is ")
    for row in fabric["rows"]:
        assert row["ci95"][0] <= row["ratio"] <= row["ci95"][1]
        assert row["verdict"] == "no significant difference" or row["verdict"].endswith(("slower", "faster"))
    page = (out / "report.html").read_text()
    assert page.index('id="verdict-fabric"') < page.index("<figure")

    # one aggregation: the summary's verdicts and efficiencies are the report's
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert [r["ratio"] for r in summary["verdicts"]["fabric"]["rows"]] == pytest.approx(
        [r["ratio"] for r in fabric["rows"]]
    )
    by_run = {run: p for p in data["points"] for run in p["runs"]}
    for row in summary["runs"]:
        run_id = row["result"].split("/")[-2]
        point = by_run[run_id]
        if point["ranks"] == 1:
            assert row["scaling_efficiency"] == 1.0 and point["comm_fraction"] is None
        else:  # one repetition: the run's efficiency is its point's
            assert row["scaling_efficiency"] == pytest.approx(point["scaling_efficiency"])
    tp = data["plots"]["throughput"]
    assert all(s["x"][0] == 1.0 and len(s["x"]) == 2 for s in tp["series"])  # each fabric meets its baseline
    assert len(tp["ideal"]) == len(tp["series"])

    from tests.launch.test_report_browser import CHROMIUM, check_what_a_reader_sees, look_at

    if CHROMIUM:
        check_what_a_reader_sees(look_at(out / "report.html", tmp_path / "profile"), data["plots"])


def test_predictor_validation_small(tmp_path):
    emulation_possible()
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/predict_validation.py",
            "--rates",
            "1gbit",
            "--models",
            "mobilenet_v3_small",
            "--engines",
            "ddp",
            "--multi-nodes",
            "3",
            "--iters",
            "3",
            "--allreduce-iters",
            "3",
            "--repeats",
            "2",
            "--max-bytes",
            str(16 * 2**20),
            "--max-seconds-per-size",  # 3 samples of 1-2 operations at the fitted sizes (>= 8 MiB)
            "1",
            "--results",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    print(proc.stdout[proc.stdout.index("predicted vs measured") :])
    points = json.loads((tmp_path / "validation.json").read_text())["points"]
    kinds = {p["kind"] for p in points}
    assert kinds == {"train", "allreduce"} and all(math.isfinite(p["error"]) for p in points)
    assert {p["ranks"] for p in points if p["kind"] == "allreduce"} == {3}
    for p in points:
        if p["kind"] == "allreduce":  # the ring formula's scaling from 2 to 3 nodes
            assert abs(p["error"]) < 0.25, p
    assert "max |error|" in proc.stdout
    (train,) = [p for p in points if p["kind"] == "train"]  # two runs, in rounds, compared by medians
    assert train["repeats"] == 2 and len(train["runs"]) == 2 and len(set(train["run_id"])) == 2
    assert train["measured_s"] == pytest.approx(statistics.median(r["measured_s"] for r in train["runs"]))
    assert train["error"] == pytest.approx(train["predicted_s"] / train["measured_s"] - 1)
    assert proc.stdout.count("round 2/2") == 2  # the unshaped run (host cost) and the shaped one
