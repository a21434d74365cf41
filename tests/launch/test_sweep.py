"""Sweeps: state, dry run, and real runs (resume after an interruption, time limits)."""

import json
import shlex
import signal
import subprocess
import time

import pytest

from launch.errors import UsageError
from launch.runs.sweep_state import SweepState, exclusive
from tests.conftest import REPO, VENV_BIN, alive, fabric_bench, rank_pids

TINY = """
[run]
model = "resnet18"
image_size = 32
batch_size = 8
warmup = 1
batches_per_iter = 2
launcher = "local"
runtime = "host"
"""


def experiment(tmp_path, head: str, matrix: str, run_extra: str = "") -> str:
    path = tmp_path / "exp.toml"
    path.write_text(f"[experiment]\n{head}\n[matrix]\n{matrix}\n{TINY}{run_extra}")
    return str(path)


def test_state_runs_pending_and_interrupted_points_and_failed_ones_on_request(tmp_path):
    state = SweepState(tmp_path, "e")
    state.mark("a", "A", "ok", run_id="A-1")
    state.mark("b", "B", "failed", "boom", run_id="B-1")
    state.mark("c", "C", "running", run_id="C-1")  # the sweep was killed outright
    again = SweepState(tmp_path, "e")
    assert [again.to_run(k, retry_failed=False) for k in "abcd"] == [False, False, True, True]
    assert again.to_run("b", retry_failed=True) and again.status("c") == "interrupted"
    assert again.point("b")["reason"] == "boom" and again.point("a")["runs"] == ["A-1"]
    with pytest.raises(UsageError, match="holds the sweep of experiment 'e'"):
        SweepState(tmp_path, "other")


def test_one_sweep_per_directory(tmp_path):
    with exclusive(tmp_path):
        with pytest.raises(UsageError, match="another sweep is running"):
            with exclusive(tmp_path):
                pass


def test_dry_run_lists_runs_with_a_count_and_runs_nothing(tmp_path):
    path = experiment(tmp_path, "repetitions = 2", 'engine = ["ddp", "horovod"]\nranks_per_node = [2]')
    proc = fabric_bench("sweep", path, "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 9 and "8 runs (4 1-rank baselines, 2 repetitions); 8 to run" in lines[-1]
    assert not (tmp_path / "sweep").exists()


def test_one_job_dry_run_prints_a_shaped_job_script(tmp_path):
    (tmp_path / "it's").mkdir()
    path = tmp_path / "it's" / "exp.toml"
    path.write_text(
        "[experiment]\ntime_limit_s = 100\n[matrix]\nranks_per_node = [2]\n"
        + TINY.replace('launcher = "local"', 'launcher = "sbatch"\npartition = "a-b.1"')
    )
    proc = fabric_bench("sweep", str(path), "--dir", str(tmp_path / "sweep"), "--one-job", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout.split("job script:\n", 1)[1]
    assert "#SBATCH --partition=a-b.1" in script and "#SBATCH --ntasks-per-node=2" in script
    assert "#SBATCH --time=00:06:00" in script  # 2 runs x 100 s + margin, in minutes
    argv = shlex.split(script.splitlines()[-1])
    assert argv[0] == "exec" and argv[2:] == [
        "sweep",
        str(path),
        "--dir",
        str(tmp_path / "sweep"),
        "--launcher",
        "srun",
    ]
    assert "srun" in proc.stdout.split("job script:")[0]  # the runs are listed as srun steps


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def statuses(directory) -> dict:
    try:
        points = json.loads((directory / "index.json").read_text())["points"]
    except (OSError, json.JSONDecodeError):
        return {}
    return {entry["label"]: entry["status"] for entry in points.values()}


def leftover_ranks(directory) -> str:
    return subprocess.run(
        ["pgrep", "-af", f"bench.torch_train.*{directory}"], capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.slow
def test_interrupted_sweep_keeps_finished_results_and_the_rerun_runs_only_the_rest(tmp_path):
    path = experiment(tmp_path, "time_limit_s = 300", "ranks_per_node = [2]", "iters = 2\n")
    directory = tmp_path / "sweep"
    # no quiet check before the runs (tests/integration/test_end_to_end.py checks it): 3 s a sweep
    plain = ("--remeasure-disturbed", "0", "--quiet-check", "0")
    argv = [str(VENV_BIN / "fabric-bench"), "sweep", path, "--dir", str(directory), *plain]
    first = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # the baseline (1 rank) finishes, then Ctrl-C while the 2-rank run trains
    wait_for(
        lambda: "ok" in statuses(directory).values() and "running" in statuses(directory).values(),
        300,
        "the first run to finish",
    )
    wait_for(lambda: leftover_ranks(directory), 120, "the second run's ranks")
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 130, out
    assert sorted(statuses(directory).values()) == ["interrupted", "ok"]
    assert leftover_ranks(directory) == ""
    finished = list(directory.glob("runs/*/result.json"))
    kept = {p: p.read_text() for p in finished}

    started = time.monotonic()
    again = fabric_bench("sweep", path, "--dir", str(directory), *plain, timeout=600)
    wall_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert sorted(statuses(directory).values()) == ["ok", "ok"]
    assert all(p.read_text() == text for p, text in kept.items())  # never rewritten
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["ran"] == 1 and summary["ok"] == 2 and summary["pending"] == 0  # only the rest ran
    two = next(r for r in summary["runs"] if not r["baseline"])
    assert two["scaling_efficiency"] > 0 and "scaling eff." in again.stdout
    print(f"rerun of 1 run: {wall_s:.1f} s, overhead per run {summary['overhead_seconds_per_run']:.2f} s")
    # nothing left to do: a third sweep runs nothing
    third = fabric_bench("sweep", path, "--dir", str(directory), *plain)
    assert third.returncode == 0 and json.loads((directory / "summary.json").read_text())["ran"] == 0


@pytest.mark.slow
def test_runs_past_their_time_limit_are_killed_with_all_ranks_and_the_sweep_goes_on(tmp_path):
    # the ranks run bench code ~2 s after a run starts here (launch.first_rank_start_seconds) and train
    # from ~5 s: the limit kills them running; a longer one only waits (two runs wait it out)
    limit = 8
    path = experiment(tmp_path, f"time_limit_s = {limit}", "ranks_per_node = [2]", "iters = 100000\n")
    directory = tmp_path / "sweep"
    # no quiet check (not what this test checks; tests/integration/test_end_to_end.py does): 3 s
    argv = ("--remeasure-disturbed", "0", "--quiet-check", "0")
    proc = fabric_bench("sweep", path, "--dir", str(directory), *argv, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["ran"] == 2 and summary["failed"] == 2  # the first failure did not stop the second run
    for row in summary["runs"]:
        assert row["status"] == "failed" and f"timed out after {limit} s; all ranks killed" in row["reason"]
        result = json.loads((directory / row["result"]).read_text())
        assert result["status"] == "failed" and result["wall_seconds"] < limit + 10
    assert leftover_ranks(directory) == "" and not alive(rank_pids(directory / "runs"))  # by name and by pid
    retry = fabric_bench("sweep", path, "--dir", str(directory), "--dry-run")
    assert "0 to run" in retry.stdout
    retry = fabric_bench("sweep", path, "--dir", str(directory), "--dry-run", "--retry-failed")
    assert "2 to run" in retry.stdout


def test_one_job_passes_force_and_stall_timeout_to_the_sweep_inside_the_job(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(
        "[experiment]\ntime_limit_s = 100\n[matrix]\nranks_per_node = [2]\n"
        + TINY.replace('launcher = "local"', 'launcher = "sbatch"')
    )
    proc = fabric_bench(
        "sweep",
        str(path),
        "--dir",
        str(tmp_path / "sweep"),
        "--one-job",
        "--dry-run",
        "--force",
        "--stall-timeout",
        "30",
    )
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.split("job script:\n", 1)[1].splitlines()[-1])
    assert argv[-3:] == ["--force", "--stall-timeout", "30"]
    bad = fabric_bench("sweep", str(path), "--stall-timeout", "0", "--dry-run")
    assert bad.returncode == 2 and bad.stderr.strip() == "fabric-bench: error: --stall-timeout must be > 0, got 0"


@pytest.mark.slow
def test_a_disturbed_point_is_measured_again_and_every_run_is_kept(tmp_path):
    """Busy processes on every core until the point's first run is recorded: that run is disturbed,
    measured once more (--remeasure-disturbed 1), both runs kept, the second naming the first and
    why; the table names the disturbed point; no rank and no hog is left."""
    import os
    import sys

    # 2 timed iterations: under the hogs each of their 4 steps takes seconds (a 41 s window for 6 iterations
    # here), dozens of the sampler's 0.5 s snapshots; more only wait
    path = experiment(tmp_path, "time_limit_s = 300", "ranks_per_node = [1]", "iters = 2\n")
    directory = tmp_path / "sweep"
    hog = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog, str(cpu)]) for cpu in sorted(os.sched_getaffinity(0))]
    # no quiet check (it would say busy and go on; tests/integration/test_end_to_end.py checks it)
    argv = [str(VENV_BIN / "fabric-bench"), "sweep", path, "--dir", str(directory)]
    argv += ["--remeasure-disturbed", "1", "--quiet-check", "0"]
    sweep = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # a run's record is judged before result.json is written: once it is there, the hogs have done
        # their part, and the second run (which the test only needs to exist) starts at full speed
        wait_for(lambda: any(directory.glob("runs/*/result.json")) or sweep.poll() is not None, 600, "a run")
    except BaseException:
        sweep.kill()  # never left to the next test
        raise
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    out, err = sweep.communicate(timeout=600)
    proc = subprocess.CompletedProcess(argv, sweep.returncode, out, err)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "measuring again (1 of at most 1)" in proc.stdout
    (point,) = json.loads((directory / "index.json").read_text())["points"].values()
    assert len(point["runs"]) == 2
    first, second = (json.loads((directory / "runs" / run / "result.json").read_text()) for run in point["runs"])
    assert first["disturbance"]["verdict"] == "disturbed"
    assert second["remeasure_of"]["run_id"] == first["run_id"] and second["remeasure_of"]["attempt"] == 1
    assert any(w.startswith("other processes used") for w in second["remeasure_of"]["why"])
    assert "disturbed" in proc.stdout  # the outcome line and the table's column
    ranks = {
        json.loads(line)["pid"]
        for p in directory.glob("runs/*/ranks/rank-*.jsonl")
        for line in p.read_text().splitlines()
    }
    assert len(ranks) == 2 and not alive(ranks | {h.pid for h in hogs})
