"""No process outlives its run: real 2-rank runs of both torch engines under every
local launcher (and inside the Apptainer image under host mpirun) get SIGINT,
SIGTERM, SIGHUP or SIGKILL; every process of the run, found by pid, must be gone
within the deadline, and the result must say what happened."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from launch.fleet import emulate
from launch.runs.run import horovod_built_for
from tests.conftest import REPO, VENV_BIN, alive, fabric_bench, need

pytestmark = pytest.mark.slow
LONG = [
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--iters",
    "400",
    "--batches-per-iter",
    "2",
]
GONE_WITHIN_S = 10.0
STOPPED = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}

LAUNCHES = {  # name -> extra fabric-bench run arguments
    "local": ["--launcher", "local"],
    "mpirun": ["--launcher", "mpirun"],
    "emulated": ["--launcher", "emulated", "--nodes", "2", "--ranks-per-node", "1"],
    "apptainer": ["--runtime", "apptainer", "--launcher", "mpirun", "--fabric", "ethernet"],
}


def start(tmp_path: Path, args: list[str]) -> subprocess.Popen:
    """fabric-bench run in a process group of its own, as a shell starts a foreground job."""
    log = open(tmp_path / "console.log", "w")
    return subprocess.Popen(
        [
            str(VENV_BIN / "fabric-bench"),
            "run",
            "--ranks",
            "2",
            *LONG,
            *args,
            "--results",
            str(tmp_path / "results"),
            "--timeout",
            "600",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def rank_pids_once_training(tmp_path: Path, ranks: int = 2, within_s: float = 240) -> set[int]:
    """Pids of the ranks, once every rank has reported a timed iteration."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        pids = {}
        for path in (tmp_path / "results").glob("*/ranks/rank-*.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("kind") == "progress":
                    pids[record["rank"]] = record["pid"]
        if len(pids) == ranks:
            return set(pids.values())
        time.sleep(0.5)
    raise AssertionError(f"ranks never trained: {(tmp_path / 'console.log').read_text()[-2000:]}")


def tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid} | {p.pid for p in root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def seconds_until_gone(pids: set[int], since: float, limit: float = 30.0) -> float:
    while alive(pids) and time.monotonic() - since < limit:
        time.sleep(0.05)
    left = alive(pids)
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {limit:g} s after the signal: {sorted(left)}"
    return time.monotonic() - since


def needs_for(launch: str, engine: str, request) -> list[str]:
    if engine == "horovod":
        need(horovod_built_for("torch"), "Horovod with PyTorch is not installed (make setup)")
    if launch == "emulated":
        need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated fabrics need root and tc")
    if launch == "apptainer":
        image = request.getfixturevalue("cpu_ethernet_image")
        return ["--image", image.image]
    return []


CASES = [  # every launch with both engines; the three stop signals spread over them
    ("local", "ddp", signal.SIGINT),
    ("local", "horovod", signal.SIGTERM),
    ("mpirun", "ddp", signal.SIGHUP),
    ("mpirun", "horovod", signal.SIGINT),
    ("emulated", "ddp", signal.SIGTERM),
    ("emulated", "horovod", signal.SIGHUP),
    ("apptainer", "ddp", signal.SIGTERM),
    ("apptainer", "horovod", signal.SIGINT),
]


@pytest.mark.parametrize("launch, engine, signum", CASES, ids=[f"{l}-{e}-{s.name}" for l, e, s in CASES])
def test_a_stop_signal_ends_every_process_and_writes_an_interrupted_result(launch, engine, signum, request, tmp_path):
    extra = needs_for(launch, engine, request)
    before_clusters = {s.name for s in emulate.status()} if launch == "emulated" else set()
    proc = start(tmp_path, ["--engine", engine, *LAUNCHES[launch], *extra])
    ranks = rank_pids_once_training(tmp_path)
    run_processes = tree(proc.pid) | ranks
    assert ranks <= run_processes or launch == "apptainer"  # container ranks: same pid namespace
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the foreground group
    else:
        os.kill(proc.pid, signum)
    code = proc.wait(timeout=60)
    gone_s = seconds_until_gone(run_processes, sent)
    print(f"\n{launch} {engine} {signum.name}: last process gone {gone_s:.2f} s after the signal")
    assert code == STOPPED[signum]
    assert gone_s < GONE_WITHIN_S
    (path,) = (tmp_path / "results").glob("*/result.json")
    result = json.loads(path.read_text())
    assert result["status"] == "interrupted" and result["interruption"]["signal"] == signum.name
    assert signum.name in result["reason"]
    progress = result["interruption"]["progress"]["ranks"]
    assert [r["rank"] for r in progress] == [0, 1]
    assert all(r["step"] >= 1 and len(r["samples_img_per_s"]["train"]) >= 1 for r in progress)
    if launch == "emulated":  # the cluster made for the run went with it (others' clusters may come and go)
        assert not [s.name for s in emulate.status() if s.name not in before_clusters and s.leftover]


def test_sigkill_of_fabric_bench_leaves_no_rank(tmp_path):
    """Nothing runs in a SIGKILLed process: the keeper sees its lifeline close and ends the run."""
    proc = start(tmp_path, ["--engine", "ddp", "--launcher", "local"])
    ranks = rank_pids_once_training(tmp_path)
    run_processes = tree(proc.pid) | ranks
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    gone_s = seconds_until_gone(run_processes, sent)
    print(f"\nlocal ddp SIGKILL of fabric-bench: last process gone {gone_s:.2f} s after the signal")
    assert gone_s < GONE_WITHIN_S
    assert not list((tmp_path / "results").glob("*/result.json"))


def sweep_file(tmp_path: Path, time_limit_s: int) -> Path:
    """One 1-rank DDP point that trains far longer than the test waits."""
    path = tmp_path / "stop.experiment.toml"
    path.write_text(f"""
[experiment]
name = "stop"
repetitions = 1
time_limit_s = {time_limit_s}
[matrix]
ranks_per_node = [1]
[run]
engine = "ddp"
model = "resnet18"
image_size = 32
batch_size = 8
warmup = 1
iters = 400
batches_per_iter = 2
launcher = "local"
runtime = "host"
""")
    return path


def start_sweep(experiment: Path, directory: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(VENV_BIN / "fabric-bench"),
            "sweep",
            str(experiment),
            "--dir",
            str(directory),
            "--remeasure-disturbed",
            "0",
            "--quiet-check",  # not what these tests check (tests/integration/test_end_to_end.py does): 3 s each
            "0",
        ],
        cwd=REPO,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def only_point(directory: Path) -> dict:
    (point,) = json.loads((directory / "index.json").read_text())["points"].values()
    return point


def test_sigterm_to_a_sweep_records_the_point_interrupted_and_a_rerun_resumes_it(tmp_path):
    experiment, directory = sweep_file(tmp_path, 600), tmp_path / "sweep"
    proc = start_sweep(experiment, directory, tmp_path / "console.log")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(
        '"progress"' in p.read_text() for p in directory.glob("runs/*/ranks/rank-0.jsonl")
    ):
        time.sleep(0.5)
    run_processes = tree(proc.pid)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "console.log").read_text()[-2000:]
    assert seconds_until_gone(run_processes, sent) < GONE_WITHIN_S
    point = only_point(directory)
    assert point["status"] == "interrupted" and "SIGTERM" in point["reason"]
    (result,) = directory.glob("runs/*/result.json")
    assert json.loads(result.read_text())["status"] == "interrupted"
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["pending"] == 1
    plan = fabric_bench("sweep", str(experiment), "--dir", str(directory), "--dry-run")
    assert plan.returncode == 0 and "1 to run" in plan.stdout, plan.stdout + plan.stderr


def test_a_sweep_time_limit_ends_every_process_of_the_run(tmp_path):
    # torchrun's worker runs bench code ~2 s after the run starts here (2.2 s with every core hogged:
    # the result's launch.first_rank_start_seconds); a longer limit only waits
    limit = 10
    experiment, directory = sweep_file(tmp_path, limit), tmp_path / "sweep"
    proc = start_sweep(experiment, directory, tmp_path / "console.log")
    seen: set[int] = set()
    while proc.poll() is None:  # every process the run ever had
        seen |= tree(proc.pid)
        time.sleep(0.2)
    assert proc.returncode == 1, (tmp_path / "console.log").read_text()[-2000:]
    assert len(seen) >= 4  # fabric-bench, the keeper, torchrun and its worker
    assert not alive(seen)
    point = only_point(directory)
    assert point["status"] == "failed" and f"timed out after {limit} s" in point["reason"]
