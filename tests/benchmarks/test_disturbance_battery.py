"""The planted battery in its small form (benchmarks/disturbance.py): one quiet run, one with
busy processes on the run's cores, one with a rank stopped for a second; the planted runs are
named with their cause, the confusion matrix is printed, and no rank, hog or planted process
is left. (Quiet runs are not asserted clean: the machine is shared; the battery reports them.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, alive

pytestmark = pytest.mark.slow


def test_the_small_battery_names_what_was_planted(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks/disturbance.py"),
            "--rounds",
            "1",
            "--causes",
            "quiet,cpu,stopped",
            "--iters",
            "6",
            "--results",
            str(tmp_path / "runs"),
            "--json",
            str(tmp_path / "battery.json"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "confusion matrix: planted cause (rows) x signal named" in out.stdout
    assert "named with the right cause:" in out.stdout and "quiet runs flagged:" in out.stdout
    data = json.loads((tmp_path / "battery.json").read_text())
    runs = {r["cause"]: r for r in data["runs"]}
    assert set(runs) == {"quiet", "cpu", "stopped"} and all(r["status"] == "ok" for r in runs.values())
    assert "cpu" in runs["cpu"]["named"], runs["cpu"]
    assert "stopped" in runs["stopped"]["named"], runs["stopped"]
    assert runs["stopped"]["stopped_pid"] in runs["stopped"]["rank_pids"]  # the rank, by its pid
    assert any(f"(pid {runs['stopped']['stopped_pid']})" in w for w in runs["stopped"]["words"])
    assert data["figures"]["named_right"] == 2 and data["figures"]["planted_runs"] == 2
    pids = {pid for r in runs.values() for pid in r["rank_pids"] + r["planted_pids"]}
    assert len(pids) >= 8 and not alive(pids)  # 2 ranks a run, a hog per core
