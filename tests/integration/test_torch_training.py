"""Real multi-process PyTorch training runs on this host's CPUs (Horovod and DDP)."""

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from launch.runs.run import horovod_built_for
from tests.results import only_result
from tests.conftest import VENV_BIN, REPO, fabric_bench, need
from launch.schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow
TINY = [
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--iters",
    "3",
    "--batches-per-iter",
    "2",
]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The module's tiny 2-rank run of (engine, controller), run once: the tests that only read
    it (its result, its console, its log) share it. Returns (the process, its results folder)."""
    done: dict[tuple[str, str], tuple[subprocess.CompletedProcess, Path]] = {}

    def run(engine: str, controller: str) -> tuple[subprocess.CompletedProcess, Path]:
        if (engine, controller) not in done:
            if engine == "horovod":
                need(horovod_built_for("torch"), "Horovod with PyTorch is not installed (make setup)")
            results = tmp_path_factory.mktemp(f"{engine}-{controller}")
            scratch_before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
            proc = fabric_bench(
                "run", "--engine", engine, "--controller", controller, "--ranks", "2", *TINY, "--results", str(results)
            )
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            assert (
                set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= scratch_before
            )  # torchrun's folder stays in the run
            done[(engine, controller)] = proc, results
        return done[(engine, controller)]

    return run


@pytest.mark.parametrize("engine, controller", [("ddp", "mpi"), ("horovod", "mpi"), ("horovod", "gloo")])
def test_two_ranks_train_to_identical_parameters(engine, controller, two_ranks):
    _, results = two_ranks(engine, controller)
    r = only_result(results)
    assert r["status"] == "ok" and r["schema_version"] == SCHEMA_VERSION
    assert r["world_size"] == 2 and r["engine"] == engine
    assert r["params_max_abs_diff"] == 0.0 and len(r["params_sha256"]) == 1  # bit-identical
    tp = r["throughput"]
    assert tp["total_img_per_s"] > 0 and len(tp["rank_img_per_s"]) == 2
    assert tp["total_img_per_s"] == pytest.approx(sum(tp["rank_img_per_s"]))
    assert len(r["samples"]["total_img_per_s"]) == 3
    assert 0.0 <= r["comm_fraction"] <= 1.0
    assert r["versions"]["torch"].startswith("2.") and r["argv"][0].endswith(
        {"ddp": "torchrun", "horovod": "mpirun" if controller == "mpi" else "horovodrun"}[engine]
    )
    # what went on the wire (bench.numerics.wire): the bytes the predictor takes, and the pieces in use
    assert r["wire"]["dtype"] == "float32" and r["wire"]["gradient_bytes"] == r["gradient_bytes"] > 0
    if engine == "ddp":
        assert (r["wire"]["bucket_bytes"], r["wire"]["first_bucket_bytes"]) == (25 * 2**20, 2**20)
    else:
        assert r["wire"]["compression"] == "none" and r["wire"]["fusion_threshold_bytes"] is None
    if engine == "horovod":
        assert r["engine_info"]["controller"] == controller
        assert r["versions"]["horovod"] == "0.28.1"


def test_a_crashing_rank_fails_the_run_with_its_error_and_keeps_other_results(tmp_path):
    keep = tmp_path / "earlier-run"
    keep.mkdir()
    (keep / "result.json").write_text('{"kept": true}')
    # batch 1 at 32x32 leaves 1 value per BatchNorm channel in resnet18's last
    # block: every rank raises inside the forward pass.
    proc = fabric_bench(
        "run",
        "--engine",
        "ddp",
        "--ranks",
        "2",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "1",
        "--warmup",
        "1",
        "--iters",
        "1",
        "--results",
        str(tmp_path),
    )
    assert proc.returncode == 1
    (path,) = [p for p in tmp_path.glob("*/result.json") if p.parent != keep]
    r = json.loads(path.read_text())
    assert r["status"] == "failed" and "Expected more than 1 value per channel" in r["reason"]
    assert r["log_tail"]
    assert json.loads((keep / "result.json").read_text()) == {"kept": True}


def test_a_killed_rank_fails_the_run_and_takes_its_peers_down(tmp_path):
    argv = [
        str(VENV_BIN / "fabric-bench"),
        "run",
        "--engine",
        "ddp",
        "--ranks",
        "2",
        "--model",
        "resnet18",
        "--image-size",
        "64",
        "--batch-size",
        "16",
        "--warmup",
        "1",
        "--iters",
        "200",
        "--results",
        str(tmp_path),
        "--timeout",
        "120",
    ]
    launcher = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    victim = None
    while time.time() < deadline and victim is None:
        time.sleep(1)
        ps = subprocess.run(["pgrep", "-f", f"bench.torch_train.*{tmp_path}"], capture_output=True, text=True)
        pids = [int(p) for p in ps.stdout.split()]
        # torchrun's agent and the two workers all match; kill a worker (the newest)
        if len(pids) >= 3:
            victim = max(pids)
    assert victim, "ranks never started"
    time.sleep(3)
    os.kill(victim, signal.SIGKILL)
    assert launcher.wait(timeout=120) == 1
    r = only_result(tmp_path)
    assert r["status"] == "failed" and r["log_tail"]
    leftovers = subprocess.run(["pgrep", "-f", f"bench.torch_train.*{tmp_path}"], capture_output=True, text=True)
    assert leftovers.stdout.strip() == ""


def test_the_console_shows_progress_and_the_table_and_the_log_keeps_the_verbose_output(two_ranks):
    # the Horovod run of test_two_ranks_train_to_identical_parameters (mpi: the default controller)
    proc, results = two_ranks("horovod", "mpi")
    lines = proc.stdout.splitlines()
    progress = [l for l in lines if " iteration " in l]
    # rank 0 speaks for the group: one line per timed iteration of each phase
    assert [l.split(":")[0] for l in progress] == [
        f"{phase} iteration {i}/3" for phase in ("train", "compute") for i in (1, 2, 3)
    ]
    assert not any("mca:" in l or "UCX" in l for l in lines)
    assert len(lines) <= len(progress) + 12  # + the summary table and the result path
    (log,) = results.glob("*/output.log")
    assert "mca:" in log.read_text()  # the transport evidence is still recorded
