"""The batch-job waiter (launch.fleet.sbatch_wait) on a real Slurm (slurmctld + slurmd on this
host, tests/slurm_cluster.py): a job's end is seen within seconds, not at sbatch --wait's next
poll (2, 10, 42, 74 s); its exit code comes through; a stop signal cancels the job; a job
Slurm no longer knows ends the wait in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from launch.fleet import sbatch_wait
from tests import slurm_cluster
from tests.conftest import REPO, alive, need

pytestmark = pytest.mark.slow
# sbatch --wait sees a job that ends 12 s after it was submitted at its 42 s poll: ~30 s late
SLEEP_S = 12
SEEN_WITHIN_S = 4.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need(slurm_cluster.available(), "Slurm is not installed (apt-get install slurm-wlm; make setup-test)")
    with slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def job_script(directory: Path, body: str) -> Path:
    script = directory / "job.sbatch"
    script.write_text(f'#!/bin/bash\n#SBATCH --output="{directory}/slurm-%j.out"\n{body}\n')
    return script


def job_fields(job_id: str, cluster) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], env=cluster.env, capture_output=True, text=True, timeout=15
    ).stdout
    return dict(token.split("=", 1) for token in out.split() if "=" in token)


def test_a_job_is_seen_ending_within_seconds_and_its_exit_code_comes_through(cluster, tmp_path):
    script = job_script(tmp_path, f"sleep {SLEEP_S}\nexit 7")
    proc = subprocess.run(
        sbatch_wait.argv(script), cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=120
    )
    waited_until = time.time()
    job_id = proc.stdout.strip()
    assert proc.returncode == 7 and job_id.isdigit(), (proc.stdout, proc.stderr, cluster.logs())
    fields = job_fields(job_id, cluster)
    assert fields["ExitCode"] == "7:0", fields
    ended = datetime.fromisoformat(fields["EndTime"]).timestamp()  # whole seconds, local time
    assert waited_until - ended < SEEN_WITHIN_S, f"seen {waited_until - ended:.1f} s after the job's end"


def test_a_stop_signal_cancels_the_job_and_leaves_nothing_running(cluster, tmp_path):
    pid_file = tmp_path / "job.pid"
    script = job_script(tmp_path, f"echo $$ > {pid_file}\nexec sleep 300")
    waiter = subprocess.Popen(
        sbatch_wait.argv(script), cwd=REPO, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert waiter.stdout is not None
    job_id = waiter.stdout.readline().strip()
    assert job_id.isdigit(), waiter.stderr.read() if waiter.stderr else ""
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.2)
    job_pid = int(pid_file.read_text())  # the job's sleep (exec'd in place of its shell)
    assert alive([job_pid]) and job_fields(job_id, cluster)["JobState"] == "RUNNING"
    waiter.send_signal(signal.SIGTERM)
    assert waiter.wait(timeout=10) == 128 + signal.SIGTERM, waiter.stderr.read() if waiter.stderr else ""
    deadline = time.monotonic() + 15
    listed = "?"
    while time.monotonic() < deadline:
        listed = subprocess.run(
            ["squeue", "--noheader", "--jobs", job_id, "--states=PD,R,CG,S,CF"],
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=15,
        ).stdout.strip()
        if not listed and not alive([job_pid]):
            break
        time.sleep(0.2)
    assert listed == "" and not alive([job_pid]), listed
    assert job_fields(job_id, cluster)["JobState"] == "CANCELLED"


def test_a_job_slurm_no_longer_knows_ends_the_wait_in_one_line(cluster, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    assert sbatch_wait.follow(sbatch_wait.Job("987654")) == sbatch_wait.VANISHED
    assert capsys.readouterr().err.splitlines() == [
        "sbatch_wait: job 987654 is no longer known to Slurm and left no exit code"
    ]


def test_a_refused_script_exits_with_sbatch_s_code_and_its_reason(cluster, tmp_path):
    script = tmp_path / "not-a-script.sbatch"
    script.write_text("no shebang\n")
    proc = subprocess.run(
        [sys.executable, "-m", sbatch_wait.MODULE, str(script)],
        cwd=REPO,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and proc.stdout == "" and "sbatch: error" in proc.stderr, proc.stderr
