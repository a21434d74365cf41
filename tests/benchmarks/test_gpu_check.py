"""benchmarks/gpu_check.sh: its plan checked against the CLI (fast), and the whole
check run end to end in its CPU mode (slow), every process it started gone after."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

from bench.record import read_records
from benchmarks import gpu_check, gpu_check_plan, gpu_check_process, gpu_check_steps, gpu_check_summary
from launch.cli.app import app
from launch.runs.run import horovod_built_for
from tests.conftest import REPO, alive, need, rank_pids
from launch.schema import SCHEMA_VERSION

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"

GPU_HOST = {
    "python": "/opt/torch/.venv/bin/python3",
    "torch": "2.11.0",
    "torchvision": "0.26.0",
    "cuda_available": True,
    "launch_cli": True,
    "horovod": None,
    "tensorflow_importable": False,
    "tools": {"mpirun": None, "torchrun": "/opt/torch/.venv/bin/torchrun"},
}


def test_the_plan_covers_three_models_two_precisions_horovod_and_tf():
    labels = [run.label for run in gpu_check_plan.planned_runs()]
    assert labels[0] == "torch-ddp-resnet50-fp32"  # the DDP/NCCL run comes first
    assert labels[1] == gpu_check_plan.SHARED_GPU_RUN  # then two ranks exchanging over NCCL on the one GPU
    assert {f"torch-ddp-{m}-{p}" for m in ("resnet50", "vgg16", "inception_v3") for p in ("fp32", "amp")} < set(labels)
    assert {"torch-horovod-resnet50-fp32", "tf-native-ResNet50-fp32", "tf-native-ResNet50-mixed"} < set(labels)


def test_every_gpu_run_is_a_valid_fabric_bench_command(tmp_path):
    """The GPU-mode argv of each run, as a dry run: flags and values the CLI accepts."""
    runner = CliRunner()
    for run in gpu_check_plan.planned_runs():
        if run.benchmark == "nccl-tests":  # nccl-tests' own binary, not a fabric-bench command
            continue
        argv = gpu_check_plan.fabric_bench_argv(run, "gpu", GPU_HOST, tmp_path / run.label, 150)
        assert argv[3] == "run" and "--gpus-per-node" in argv
        assert ("--allreduce" in argv) == (run.engine == "ddp")
        result = runner.invoke(app, [*argv[3:], "--dry-run"])
        assert result.exit_code == 0, (run.label, result.output)
        if run.engine == "ddp":
            assert '"--backend", "nccl"' in result.output and '"NCCL_DEBUG": "INFO"' in result.output
        if run.engine == "horovod":
            assert "--controller" in argv  # no mpirun on that host: horovodrun --gloo
        if run.ranks == 2:  # each rank a host of its own to NCCL (bench.torch_device)
            assert '"FABRIC_BENCH_SHARED_GPU": "1"' in result.output
            assert '"--nproc-per-node", "2"' in result.output or '"-np", "2"' in result.output


def test_the_gpu_check_compares_batch_64_with_256_and_sets_the_harness_allreduce_beside_nccl_tests(tmp_path):
    """Issue 42, item 9: one GPU, ResNet-50 fp32 at the default batch (256) and at 64; the harness's
    allreduce on device buffers (torch/NCCL, two ranks on the GPU) and nccl-tests' all_reduce_perf with
    its own conventions (doubling sizes from 8 B, 5 warm-up and 20 timed operations, one GPU)."""
    runs = {run.label: run for run in gpu_check_plan.planned_runs()}
    runner = CliRunner()
    default = runner.invoke(
        app,
        [
            *gpu_check_plan.fabric_bench_argv(runs["torch-ddp-resnet50-fp32"], "gpu", GPU_HOST, tmp_path, 150)[3:],
            "--dry-run",
        ],
    )
    small = runner.invoke(
        app,
        [
            *gpu_check_plan.fabric_bench_argv(runs[gpu_check_plan.BATCH_RUN], "gpu", GPU_HOST, tmp_path, 150)[3:],
            "--dry-run",
        ],
    )
    assert '"--batch-size", "256"' in default.output and '"--batch-size", "64"' in small.output
    assert '"--model", "resnet50"' in small.output and '"--gpus-per-node"' not in small.output  # argv of the ranks
    allreduce = gpu_check_plan.fabric_bench_argv(runs[gpu_check_plan.ALLREDUCE_RUN], "gpu", GPU_HOST, tmp_path, 150)
    shown = runner.invoke(app, [*allreduce[3:], "--dry-run"])
    assert shown.exit_code == 0, shown.output
    assert '"--backend", "torch"' in shown.output and '"FABRIC_BENCH_GPUS_PER_NODE": "1"' in shown.output
    assert '"NCCL_DEBUG": "INFO"' in shown.output and '"FABRIC_BENCH_SHARED_GPU": "1"' in shown.output
    with_nccl_tests = {
        **GPU_HOST,
        "tools": {**GPU_HOST["tools"], "all_reduce_perf": "/opt/nccl-tests/build/all_reduce_perf"},
    }
    assert gpu_check_plan.nccl_tests_argv(with_nccl_tests, "gpu") == [
        "/opt/nccl-tests/build/all_reduce_perf",
        "-b",
        "8",
        "-e",
        str(2**30),
        "-f",
        "2",
        "-g",
        "1",
        "-w",
        "5",
        "-n",
        "20",
    ]
    assert "all_reduce_perf is not on PATH" in gpu_check_plan.unavailable(runs[gpu_check_plan.NCCL_TESTS_RUN], GPU_HOST)
    assert gpu_check_plan.unavailable(runs[gpu_check_plan.NCCL_TESTS_RUN], with_nccl_tests) is None
    # the harness's allreduce: under torchrun (no mpirun, no mpi4py) unless the launch CLI, mpirun and
    # mpi4py are all there; bench.stats needs nothing beyond the standard library
    allreduce_run = runs[gpu_check_plan.ALLREDUCE_RUN]
    assert gpu_check_plan.allreduce_by_torchrun(GPU_HOST)
    assert gpu_check_plan.unavailable(allreduce_run, {**GPU_HOST, "torchvision": None}) is None
    mpi_host = {**GPU_HOST, "modules": {"mpi4py": True}, "tools": {**GPU_HOST["tools"], "mpirun": "/usr/bin/mpirun"}}
    assert (
        not gpu_check_plan.allreduce_by_torchrun(mpi_host)
        and gpu_check_plan.unavailable(allreduce_run, mpi_host) is None
    )
    direct = gpu_check_plan.allreduce_direct_argv(allreduce_run, "gpu", tmp_path)
    assert direct[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "mpirun" not in " ".join(direct)
    assert direct[direct.index("--module") + 1 :][:3] == ["bench.allreduce", "--backend", "torch"]
    assert gpu_check_plan.direct_env(allreduce_run, "gpu") == {
        "FABRIC_BENCH_GPUS_PER_NODE": "1",
        "FABRIC_BENCH_SHARED_GPU": "1",
    }
    assert gpu_check_plan.direct_env(runs["torch-ddp-resnet50-fp32"], "gpu") == {"FABRIC_BENCH_GPUS_PER_NODE": "1"}
    assert gpu_check_plan.direct_env(allreduce_run, "cpu") == {"FABRIC_BENCH_GPUS_PER_NODE": "0"}


def test_what_a_bare_gpu_host_lacks_is_named():
    runs = {run.label: run for run in gpu_check_plan.planned_runs()}
    assert gpu_check_plan.unavailable(runs["torch-ddp-vgg16-amp"], GPU_HOST) is None
    assert "Horovod is not installed" in gpu_check_plan.unavailable(runs["torch-horovod-resnet50-fp32"], GPU_HOST)
    assert "TensorFlow is not installed" in gpu_check_plan.unavailable(runs["tf-native-ResNet50-fp32"], GPU_HOST)
    no_torch = {**GPU_HOST, "torch": None, "torch_error": "ModuleNotFoundError: No module named 'torch'"}
    assert "No module named 'torch'" in gpu_check_plan.unavailable(runs["torch-ddp-resnet50-fp32"], no_torch)


def test_help_and_a_bad_label():
    assert "--cpu" in subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True).stdout
    bad = subprocess.run(
        [str(SCRIPT), "--cpu", "--only", "nope", "--out", "/dev/null/x"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "unknown run label(s) nope" in bad.stderr
    gpu = subprocess.run(
        [str(SCRIPT), "--skip-probes", "--out", "/dev/null/x"], capture_output=True, text=True, timeout=300
    )
    assert gpu.returncode == 2 and "--skip-probes goes with --cpu" in gpu.stderr  # a GPU check keeps its probes


def test_a_silent_hang_meets_its_deadline(tmp_path):
    """A step that prints nothing was waited for until a line came (forever); now the deadline
    ends it and its whole session, and the check goes on (issue 29, item 12)."""
    log = gpu_check_process.Log(tmp_path / "check.log")
    marker = f"silent-hang-{os.getpid()}"
    started = time.monotonic()
    code = gpu_check_process.execute(
        [sys.executable, "-c", "import time, sys; time.sleep(120)", marker],
        tmp_path / "hang.log",
        dict(os.environ),
        3,
        log,
    )
    assert code == 124 and time.monotonic() - started < 30
    assert "no end after 3 s" in (tmp_path / "check.log").read_text()
    assert [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])] == []


def test_steps_past_the_whole_check_s_deadline_are_skipped_and_the_summary_still_written(tmp_path):
    log = gpu_check_process.Log(tmp_path / "check.log")
    info = {**GPU_HOST, "launch_cli": True}
    started = time.monotonic()
    probes = gpu_check_steps.run_probes("gpu", info, tmp_path, dict(os.environ), deadline=started, log=log)
    entries = gpu_check_steps.run_all("gpu", info, tmp_path, 360, 150, log, started, deadline=started)
    assert {p["status"] for p in probes.values()} == {"skipped"}
    assert {e["status"] for e in entries} <= {"skipped", "absent"} and not (tmp_path / "runs").exists()
    captured = {"captures": {}, "parsed": {}}
    summary = gpu_check_summary.write_summary(tmp_path, "gpu", info, captured, entries, 1.0, probes)
    assert summary["failed"] == [] and "- collective: skipped" in (tmp_path / "summary.md").read_text()


def still_running(pids: set[int], out: Path, within_s: float = 10.0) -> list:
    """Processes of the check alive after it returned: its ranks by pid, and anything naming its folder."""
    deadline = time.monotonic() + within_s
    while True:
        left = [
            p
            for p in psutil.process_iter(["pid", "cmdline", "status"])
            if p.info["status"] != psutil.STATUS_ZOMBIE
            and (p.pid in pids or str(out) in " ".join(p.info["cmdline"] or []))
        ]
        if not left or time.monotonic() > deadline:
            return [(p.pid, p.info["cmdline"]) for p in left]
        time.sleep(0.5)


@pytest.mark.slow
def test_cpu_mode_end_to_end(tmp_path):
    need(importlib.util.find_spec("torch") is not None, "torch is not installed (make setup)")
    out = tmp_path / "gpu-check"
    proc = subprocess.run(
        [str(SCRIPT), "--cpu", "--out", str(out), "--archive", str(tmp_path / "check.tar.gz")],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite"), "VENV": sys.prefix},
    )  # this test's venv, found as make's $VENV
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"gpu_check: using {sys.prefix}/bin/python" in proc.stdout  # the Python it chose
    assert "python " in proc.stdout  # the Pythons it tried

    summary = json.loads((out / "summary.json").read_text())
    environment = json.loads((out / "environment.json").read_text())
    assert summary["mode"] == "cpu" and environment["torch"] and environment["cuda_available"] is False
    runs = {r["label"]: r for r in summary["runs"]}
    expected_ok = {
        "torch-ddp-resnet50-fp32",
        "torch-ddp-resnet50-amp",
        "torch-ddp-vgg16-fp32",
        "torch-ddp-inception_v3-fp32",
        gpu_check_plan.SHARED_GPU_RUN,
    }
    if horovod_built_for("torch"):
        expected_ok.add("torch-horovod-resnet50-fp32")
    else:
        assert runs["torch-horovod-resnet50-fp32"]["status"] == "absent"
    if environment["tensorflow_importable"]:
        expected_ok.add("tf-native-ResNet50-fp32")
    else:
        assert runs["tf-native-ResNet50-fp32"]["status"] == "absent"
    for label in expected_ok:
        entry = runs[label]
        assert entry["status"] == "ok", (label, entry.get("reason"))
        result = json.loads((out / entry["result"]).read_text())
        ranks = 2 if label == gpu_check_plan.SHARED_GPU_RUN else 1
        assert result["status"] == "ok" and result["schema_version"] == SCHEMA_VERSION and result["world_size"] == ranks
        assert result["numerics"]["memory_format"] and result["numerics"]["gradient_wire_dtype"] == "float32"
        assert result["throughput"]["total_img_per_s"] > 0 and result["compute_img_per_s"] > 0
        assert result["spec"]["precision"] == entry["precision"] and result["device"] == "cpu"
        assert entry["compute_step_s"] == pytest.approx(
            result["spec"]["batch_size"] * ranks / result["compute_img_per_s"]
        )
        assert (out / entry["result"]).parent.joinpath("output.log").exists()
    assert runs["torch-ddp-resnet50-fp32"]["engine_info"]["backend"] == "gloo"
    for label in ("torch-ddp-vgg16-amp", "torch-ddp-inception_v3-amp", "tf-native-ResNet50-mixed"):
        if label.startswith("tf") and not environment["tensorflow_importable"]:
            assert runs[label]["status"] == "absent"
        else:
            assert runs[label]["status"] == "skipped" and "--full" in runs[label]["reason"]
    assert summary["failed"] == [] and len(summary["compute_step_s"]) >= 4
    # the probes: a one-rank collective (gloo here, NCCL on a GPU) and compute-only img/s without any group
    probes = summary["probes"]
    assert probes["collective"]["status"] == "ok" and probes["collective"]["backend"] == "gloo"
    assert probes["compute"]["status"] == "ok" and probes["compute"]["img_per_s"] > 0
    assert (out / probes["compute"]["log"]).exists()

    # nvidia-smi captures: absent, with the reason, in CPU mode
    assert set(summary["captures"]) == {
        "nvidia_smi.txt",
        "nvidia_smi_query.csv",
        "nvidia_smi_topo.txt",
        "nvidia_smi_q.txt",
    }
    for name, capture in summary["captures"].items():
        assert capture["status"] == "absent" and capture["reason"].startswith("--cpu"), name
        assert (out / "captures" / f"{name}.absent").read_text().startswith("--cpu")
    markdown = (out / "summary.md").read_text()
    assert "| torch-ddp-resnet50-fp32 | ok |" in markdown and "compute step (ms)" in markdown
    # the harness's allreduce (gloo here) in the side-by-side table; nccl-tests is for GPU hosts
    allreduce = runs[gpu_check_plan.ALLREDUCE_RUN]
    assert allreduce["status"] == "ok" and allreduce["allreduce_ranks"] == 2, allreduce.get("reason")
    assert f"| {gpu_check_plan.ALLREDUCE_RUN} | 2 | " in markdown and "Not like for like" not in markdown
    assert (out / "gpu_check.log").read_text().count("run torch-ddp-resnet50-fp32: ok") == 1
    assert (tmp_path / "check.tar.gz").stat().st_size > 1000
    assert not (out / "tmp").exists()

    pids = set().union(*(rank_pids(run) for run in (out / "runs").iterdir()))
    assert len(pids) >= len(expected_ok)
    assert still_running(pids, out) == []


@pytest.mark.slow
def test_without_the_launch_cli_torch_runs_go_straight_to_the_bench_program(tmp_path):
    """The fallback for a Python that lacks typer/rich/psutil/scipy: torchrun + bench.torch_train.
    The probes are left out: they do not go through the launch CLI (test_cpu_mode_end_to_end and the
    bare host's test run them)."""
    need(importlib.util.find_spec("torch") is not None, "torch is not installed (make setup)")
    out = tmp_path / "direct"
    only = "torch-ddp-resnet50-fp32,torch-horovod-resnet50-fp32"
    proc = subprocess.run(
        [str(SCRIPT), "--cpu", "--skip-probes", "--out", str(out), "--only", only],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "GPU_CHECK_FORCE_DIRECT": "1", "GPU_CHECK_PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    direct, horovod = summary["runs"]
    assert direct["status"] == "ok" and direct["format"] == "rank records" and direct["compute_img_per_s"] > 0
    assert horovod["status"] == "absent" and "launch CLI" in horovod["reason"]
    assert {p["status"] for p in summary["probes"].values()} == {"skipped"} and summary["failed"] == []
    assert still_running(rank_pids(out / "runs"), out) == []


def test_the_summary_sets_the_harness_allreduce_beside_nccl_tests_with_their_ranks(tmp_path):
    """The side-by-side table from what each left: a real 2-rank allreduce result of the harness
    (tests/data/node_samplers) and a real nccl-tests output (tests/data/nccl_tests, 2 ranks)."""
    data = REPO / "tests" / "data"
    harness = gpu_check_summary.from_allreduce_result(
        json.loads((data / "node_samplers/slow-node/result.json").read_text()), {"label": "allreduce-torch-2ranks"}
    )
    text = (data / "nccl_tests/gb10-two-nodes/all_reduce_perf.out").read_text()
    nccl = gpu_check_summary.from_nccl_tests(text, {"label": "nccl-tests-all_reduce_perf"}, 0)
    assert harness["status"] == nccl["status"] == "ok" and harness["allreduce_ranks"] == nccl["allreduce_ranks"] == 2
    assert harness["values_correct"] is True  # every recorded size's max_abs_error is 0
    wrong = json.loads((data / "node_samplers/slow-node/result.json").read_text())
    wrong["sizes"] = [{**wrong["sizes"][0], "max_abs_error": 1.0}, *wrong["sizes"][1:]]
    assert gpu_check_summary.from_allreduce_result(wrong, {})["values_correct"] is False
    largest = max(float(line.split()[-3]) for line in text.splitlines() if line.strip()[:1].isdigit())
    assert nccl["peak_busbw_gbyte_s"] == largest  # in place, GB/s as nccl-tests printed it
    recorded = json.loads((data / "node_samplers/slow-node/result.json").read_text())["sizes"][0]
    assert harness["allreduce"][0]["in_place"]["busbw_gbyte_s"] == pytest.approx(recorded["busbw_gbit_s"] / 8)
    captured: dict = {"captures": {}, "parsed": {}}
    gpu_check_summary.write_summary(tmp_path, "gpu", {"host": "h"}, captured, [harness, nccl], 1.0)
    markdown = (tmp_path / "summary.md").read_text()
    assert "| allreduce-torch-2ranks | 2 | 4194304 |" in markdown
    assert "| nccl-tests-all_reduce_perf | 2 | 65536 |" in markdown  # the recorded table's last row
    assert "Not like for like" not in markdown  # both ran two ranks


def test_allreduces_of_different_rank_counts_are_said_not_to_compare():
    """nccl-tests -g 1 on a one-GPU host is one rank (busbw 0); the harness's two ranks share the GPU."""
    side = [{"label": "allreduce-torch-2ranks", "allreduce_ranks": 2}, {"label": "nccl-tests", "allreduce_ranks": 1}]
    (line,) = [text for text in gpu_check_summary.unlike_allreduces(side) if text]
    assert "allreduce-torch-2ranks 2, nccl-tests 1" in line and "busbw 0" in line
    unknown = [
        {"label": "allreduce-torch-2ranks", "allreduce_ranks": 2},
        {"label": "nccl-tests", "allreduce_ranks": None},
    ]
    assert gpu_check_summary.unlike_allreduces(unknown) == []


def test_on_a_gpu_the_steps_time_limits_add_up_to_five_minutes(monkeypatch):
    """Issue 49: the whole check fits 5 minutes on a GPU, so a second try fits a 15-minute slot: its
    steps' limits add up to 300 s, counted from the shell's start, and are its default deadline."""
    limits = gpu_check_plan.STEP_LIMITS_S["gpu"]
    assert list(limits) == ["python", "environment", "captures", "gpu_states", "probes", "runs"]
    assert sum(limits.values()) == gpu_check_plan.GPU_CHECK_LIMIT_S <= 300
    for mode, steps in gpu_check_plan.STEP_LIMITS_S.items():
        assert sum(gpu_check_plan.PROBE_LIMITS_S[mode].values()) <= steps["probes"]
        assert gpu_check_plan.RUN_LIMIT_S[mode] <= steps["runs"]
        assert steps["python"] == limits["python"]
    assert f"find_python_s={limits['python']:g}  #" in SCRIPT.read_text()  # the shell's own step
    assert "timeout_s 330" in SCRIPT.read_text()  # the lent machine's command: the limits and the archive
    monkeypatch.setenv("GPU_CHECK_STARTED", str(time.time() - 50))
    assert time.monotonic() - gpu_check.started_at() == pytest.approx(50, abs=2)


def test_the_check_loads_without_importing_what_a_bare_host_lacks():
    """The check's own modules, as benchmarks/gpu_check.sh loads them, import no framework and nothing
    beyond the standard library and plain modules of the bundle (a bare host has torch alone)."""
    heavy = ("pydantic", "scipy", "mpi4py", "typer", "rich", "psutil", "numpy", "torch", "launch.cli")
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy, sys\n"
            "runpy.run_path(sys.argv[1], run_name='gpu_check')\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} or m.startswith('launch.cli')))",
            str(REPO / "benchmarks" / "gpu_check.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert shown.returncode == 0 and shown.stdout.strip() == "[]", shown.stdout + shown.stderr[-2000:]


def torch_closure() -> dict[str, importlib.metadata.Distribution]:
    """torch's distribution and every one its Requires-Dist names, recursively (markers evaluated
    here, extras followed: cuda-toolkit[cublas,...]), from this venv: what installing torch brings."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str]]] = [("torch", frozenset())]
    followed: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (canonicalize_name(name), extras) in followed:
            continue
        followed.add((canonicalize_name(name), extras))
        dist = importlib.metadata.distribution(name)
        found[canonicalize_name(dist.metadata["Name"])] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((req.name, frozenset(req.extras)))
    return found


def torch_only_python(tmp_path: Path) -> Path:
    """A fresh venv (no pip, no system site packages) whose site-packages holds links to exactly
    torch's distributions (torch_closure): their top-level packages and dist-infos; a namespace
    package several share (nvidia, cuda) is a folder of links to each one's own part."""
    venv = tmp_path / "torch-only"
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    for dist in torch_closure().values():
        for path in {Path(f.parts[0]) if f.parts[0] != ".." else None for f in dist.files or []} - {None}:
            assert path is not None
            source = Path(str(dist.locate_file(path)))
            if path.suffix == ".pth" or path.name == "__pycache__" or not source.exists():
                continue
            if source.is_dir() and not (source / "__init__.py").exists() and not path.suffix:
                (site / path).mkdir(exist_ok=True)  # a namespace package: this distribution's parts of it
                for part in {f.parts[1] for f in dist.files or [] if f.parts[0] == path.name and len(f.parts) > 2}:
                    if not (site / path / part).exists():
                        (site / path / part).symlink_to(source / part)
            elif not (site / path).exists():
                (site / path).symlink_to(source)
    return venv / "bin" / "python"


@pytest.mark.slow
def test_a_bare_host_with_only_torch_gets_absent_lines_not_a_traceback(tmp_path):
    """Issue 49: a Python with torch and what torch requires, nothing else (no pydantic, scipy, mpi4py,
    torchvision; no venv's tools on PATH, so no Apptainer or mpirun). The whole check runs in CPU mode:
    every part it cannot do is an absent line with why, the harness's allreduce runs under torchrun
    with the torch backend and its values are checked, within 5 minutes, and no rank is left."""
    need(importlib.util.find_spec("torch") is not None, "torch is not installed (make setup)")
    python = torch_only_python(tmp_path)
    bare_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    imports = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib\n"
            "for m in ('torch', 'pydantic', 'scipy', 'mpi4py', 'torchvision'):\n"
            "    try:\n        importlib.import_module(m); print(m, 'imports')\n"
            "    except ImportError as e:\n        print(m, 'fails:', e)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=bare_env,
        cwd=tmp_path,
    )
    said = dict(line.split(" ", 1) for line in imports.stdout.splitlines())
    assert said["torch"] == "imports", imports.stdout + imports.stderr[-2000:]
    for module in ("pydantic", "scipy", "mpi4py", "torchvision"):
        assert said[module].startswith(f"fails: No module named '{module}'"), said

    out = tmp_path / "check"
    started = time.monotonic()
    proc = subprocess.run(
        [str(SCRIPT), "--cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**bare_env, "GPU_CHECK_PYTHON": str(python)},
    )
    seconds = time.monotonic() - started
    told = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr and proc.returncode == 0, told
    assert f"gpu_check: using {python}" in proc.stdout and seconds < 300
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed"] == [] and summary["seconds"] < 300
    absent = {a["part"]: a["reason"] for a in summary["absent"]}
    for module in ("pydantic", "scipy", "mpi4py", "torchvision"):
        assert absent[module].startswith(f"not importable by {python}: "), absent
    assert absent["apptainer"].startswith("not on PATH: ") and "pydantic" in absent["launch CLI"]
    markdown = (out / "summary.md").read_text()
    assert all(f"- {part}: absent ({why})" in markdown for part, why in absent.items())
    # what needs torchvision or the launch CLI is absent, with why; nothing failed
    runs = {r["label"]: r for r in summary["runs"]}
    assert (
        runs["torch-ddp-resnet50-fp32"]["status"] == "absent"
        and "torchvision" in runs["torch-ddp-resnet50-fp32"]["reason"]
    )
    assert runs["tf-native-ResNet50-fp32"]["status"] == "absent"
    probes = summary["probes"]
    assert probes["collective"]["status"] == "ok" and probes["collective"]["backend"] == "gloo"
    assert probes["compute"]["status"] == "absent" and "torchvision" in probes["compute"]["reason"]
    # the harness's allreduce: torchrun, torch backend (gloo on CPUs), no MPI, every size's values checked
    allreduce = runs[gpu_check_plan.ALLREDUCE_RUN]
    assert allreduce["status"] == "ok" and allreduce["values_correct"] is True, allreduce
    assert allreduce["started_by"] == "torchrun (no launch CLI)" and allreduce["allreduce_ranks"] == 2
    assert allreduce["backend_info"]["process_group"] == "gloo" and allreduce["allreduce"]
    records = read_records(out / "runs" / gpu_check_plan.ALLREDUCE_RUN / "ranks")
    checked = [row for r in records if r.get("kind") == "allreduce" for row in r["sizes"]]
    assert checked and all(row["max_abs_error"] == 0 for row in checked)
    pids = rank_pids(out / "runs")
    assert len(pids) == 2 and alive(pids) == set()
