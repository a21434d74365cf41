"""The planted battery in its small form (benchmarks/disturbance.py): one quiet run, one with
busy processes on the run's cores, one with a rank stopped for a second; the planted runs are
named with their cause, the confusion matrix is printed, and no rank, hog or planted process
is left. (Quiet runs are not asserted clean: the machine is shared; the battery reports them.)
And its verdict demonstration, small: a fabric verdict the planted runs turn into a difference
that is not there, and the record takes back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, alive, need

pytestmark = pytest.mark.slow


def battery(tmp_path, *options: str) -> tuple[subprocess.CompletedProcess, dict]:
    """benchmarks/disturbance.py with `options`, its results and JSON under tmp_path; (the
    process, the JSON) once it has exited 0."""
    argv = [sys.executable, str(REPO / "benchmarks/disturbance.py"), *options]
    argv += ["--results", str(tmp_path / "runs"), "--json", str(tmp_path / "battery.json")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads((tmp_path / "battery.json").read_text())


def test_the_small_battery_names_what_was_planted(tmp_path):
    out, data = battery(
        tmp_path, "--rounds", "1", "--causes", "quiet,cpu,stopped", "--iters", "3", "--verdict-repetitions", "0"
    )  # 3 timed iterations of 2 batches: the rank is stopped at the third timed batch, inside the window
    assert "confusion matrix: planted cause (rows) x signal named" in out.stdout
    assert "named with the right cause:" in out.stdout and "quiet runs flagged:" in out.stdout
    runs = {r["cause"]: r for r in data["runs"]}
    assert set(runs) == {"quiet", "cpu", "stopped"} and all(r["status"] == "ok" for r in runs.values())
    assert "cpu" in runs["cpu"]["named"], runs["cpu"]
    assert "stopped" in runs["stopped"]["named"], runs["stopped"]
    assert runs["stopped"]["stopped_pid"] in runs["stopped"]["rank_pids"]  # the rank, by its pid
    assert any(f"(pid {runs['stopped']['stopped_pid']})" in w for w in runs["stopped"]["words"])
    assert data["figures"]["named_right"] == 2 and data["figures"]["planted_runs"] == 2
    pids = {pid for r in runs.values() for pid in r["rank_pids"] + r["planted_pids"]}
    assert len(pids) >= 8 and not alive(pids)  # 2 ranks a run, a hog per core


def test_the_verdict_a_planted_disturbance_flips_is_taken_back_by_the_record(tmp_path):
    need(os.geteuid() == 0 and shutil.which("iperf3") is not None, "emulated clusters need root (and iperf3)")
    # three repetitions: with two a side, the verdict's CI (t with ~2 degrees of freedom) is so
    # wide that a loaded machine can hide even the planted half-speed runs
    out, data = battery(tmp_path, "--rounds", "0", "--verdict-repetitions", "3", "--iters", "3")
    demo = data["verdict"]
    print(out.stdout[-1500:])
    runs = demo["runs"]
    planted = [r for r in runs if r["fabric"] == demo["planted"] and not r["remeasure_of"]]
    repeats = [r for r in runs if r["remeasure_of"]]
    assert len(planted) == 3 and all(r["verdict"] == "disturbed" for r in planted), runs
    # every disturbed first run was measured again, the repeat naming it
    assert {r["run_id"] for r in planted} <= {r["remeasure_of"]["run_id"] for r in repeats}
    # without the record: busy processes on the planted side read as a slower fabric
    without, with_record = demo["without_record"], demo["with_record"]
    assert without["significant"] and "slower" in without["verdict"] and without["speed_ratio"] < 0.85, without
    assert without["left_out"] == []
    # with it: the disturbed runs are left out, named, and the two names of one link read alike
    disturbed = {r["run_id"] for r in runs if r["verdict"] == "disturbed"}
    assert set(with_record["left_out"]) == disturbed and with_record["runs"] >= 2
    assert 0.8 < with_record["speed_ratio"] < 1.25, with_record
    assert "verdict: emu-eth-10000m against emu-eth-10g" in out.stdout and "with the record" in out.stdout
    pids = {pid for r in runs for pid in r["rank_pids"]} | set(demo["planted_pids"])
    assert len(pids) >= 18 and not alive(pids)  # 2 ranks a run, 9 or more runs; a hog per core


def test_the_battery_names_the_rate_limited_node_under_slurm(tmp_path):
    """The rate-limited cause (an emulated Slurm cluster, node n1's egress shaped to a quarter for
    the run): that node is named by the link signal, and only it; its quiet control on the same
    cluster names no link; the cluster, its daemons and every rank are gone after."""
    from launch.fleet import emulate
    from launch.fleet.emulate import slurm_nodes

    need(os.geteuid() == 0 and slurm_nodes.available(), "an emulated Slurm cluster needs root and slurm-wlm")
    out, data = battery(
        tmp_path, "--rounds", "1", "--causes", "rate-limited", "--iters", "4", "--verdict-repetitions", "0"
    )
    runs = {r["cause"]: r for r in data["runs"]}
    assert set(runs) == {"rate-limited", "quiet-slurm"} and all(r["status"] == "ok" for r in runs.values())
    limited, quiet = runs["rate-limited"], runs["quiet-slurm"]
    assert limited["named"] == ["link"] and limited["rate_limited"] == ["n1"], limited
    assert any("n1's egress on fbemu0 is shaped to 250 Mbit/s" in w for w in limited["words"])
    assert "link" not in quiet["named"] and quiet["rate_limited"] == [], quiet
    assert limited["nodes"] == quiet["nodes"] == ["n0", "n1"]  # every node sampled on its own
    pids = {pid for r in runs.values() for pid in r["rank_pids"]}
    assert len(pids) == 4 and not alive(pids)
    assert not [ns for ns in emulate.namespaces() if ns.startswith("fbemu-bat")]
