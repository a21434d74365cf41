"""The GPU check behind benchmarks/gpu_check.sh (which picks the Python; see its header).

    benchmarks/gpu_check.sh [--cpu [--full]] [--out DIR] [--budget-s N] [--only LABELS] [--archive FILE.tar.gz]

Steps, each recorded with its status (ok | failed | absent | skipped) and, where
not ok, the reason:
1. environment: what this Python and this host offer (torch, CUDA, NCCL,
   torchvision, TensorFlow, Horovod, torchrun/mpirun/horovodrun, nvidia-smi);
2. captures: `nvidia-smi -q`, `nvidia-smi topo -m` and `nvidia-smi --query-gpu=...`
   (absent with --cpu, or where nvidia-smi is missing), parsed by launch.site.probe; then the
   GPU's state (clocks, clock-event reasons, compute processes) idle, beside one load process
   and beside two (~40 s), under captures/gpu_states/;
3. probes (benchmarks/gpu_probes.py), each under a hard deadline: a one-rank NCCL
   all_reduce (gloo with --cpu; ~10 s, its NCCL log kept in nccl/probe-collective.log),
   then ResNet-50's compute-only img/s with no process group at all (~30 s), so a
   failed NCCL still leaves a figure;
4. runs: `fabric-bench run --launcher local` for torch DDP (NCCL on a GPU) x
   ResNet-50, VGG-16, Inception-v3 x fp32, AMP, one rank each at batch 256 (the
   default on GPUs); ResNet-50 fp32 again at batch 64 (the batch comparison); two
   DDP ranks sharing the one GPU (NCCL_HOSTID per rank: NCCL's network transport
   carries their exchange for real); the harness's allreduce (torch/NCCL, device
   buffers, two ranks on the GPU) and, where a site put it on PATH, nccl-tests'
   all_reduce_perf with its own conventions beside it; a Horovod run; TF
   ResNet-50 fp32 and mixed. Each writes
   result.json in the bundle's format under
   runs/<label>/. Where the launch CLI cannot be imported (typer, rich, psutil or
   scipy missing), torch runs fall back to the bench program under torchrun and
   are summarised from their rank records;
5. summary.json / summary.md: img/s, compute-only img/s, and the predictor's
   compute step (launch.results.model: batch x ranks / compute-only img/s) per model.

A hard deadline (--deadline-s; 470 s on a GPU) ends whatever step is running, silent
or not, marks the steps not reached as skipped and still writes the summary.
Expected on one H200 with 16 cores: environment ~20 s, captures ~5 s, probes ~40 s,
each 1-rank run 30-50 s, the 2-rank run ~60 s, each TF run ~60 s.

Only the standard library and launch.site.probe / launch.results.transport are imported here:
the check must report, not crash, whatever is missing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from launch.site import probe  # noqa: E402  (standard library only)

from launch.ranks.reporting import NCCL_REPORTING_ENV  # noqa: E402  (standard library only)
from launch.results import transport  # noqa: E402
from bench.placement import SHARED_GPU_ENV  # noqa: E402  (standard library only)

TORCH_MODELS = ("resnet50", "vgg16", "inception_v3")
TORCH_PRECISIONS = ("fp32", "amp")
TF_MODEL, TF_PRECISIONS = "ResNet50", ("fp32", "mixed")
# GPU: the models' own image sizes, a real batch; CPU: tiny, to prove the path
SIZES: dict[str, dict[str, int | None]] = {
    "gpu": {"batch_size": 256, "warmup": 5, "iters": 5, "batches_per_iter": 5, "image_size": None},
    "cpu": {"batch_size": 2, "warmup": 0, "iters": 2, "batches_per_iter": 1, "image_size": 32},
}
# Inception-v3 trains with its auxiliary head (bench.torch_train), whose 5x5 conv after a
# 5x5/3 pooling needs 17x17 at Mixed_6e: 299 px; anything smaller fails (75 px, the
# catalog's minimum, fails with "Output size is too small").
CPU_IMAGE_SIZE = {"inception_v3": 299}
# With --cpu (unless --full), to stay near 2 minutes on 2 cores: AMP on torch ResNet-50 only,
# bf16 autocast being slow on CPUs (VGG-16 AMP took 206 s for four batches of 2 here, fp32
# 54 s), and TF in fp32 only (each TF run costs ~40 s of start-up and tracing).
# The batch comparison (issue 42, item 9): ResNet-50 on one GPU at batch 64 beside the default 256,
# the batch NVIDIA's published ResNet-50 figures use (64 leaves an H100-class GPU launch-bound in eager mode)
SMALL_BATCH = 64
BATCH_RUN = f"torch-ddp-resnet50-fp32-b{SMALL_BATCH}"
# The harness's allreduce (bench.allreduce: torch/NCCL on device buffers, two ranks sharing the one GPU
# as separate NCCL hosts) beside nccl-tests' all_reduce_perf where a site has built it: the same
# conventions (doubling sizes, in place and out of place, algbw and busbw), so the figures sit side by side
ALLREDUCE_RUN = "allreduce-torch-2ranks"
NCCL_TESTS_RUN = "nccl-tests-all_reduce_perf"
ALLREDUCE_MAX_BYTES = {"gpu": 2**30, "cpu": 2**16}   # 1 GiB: the check's budget; the bundle's own runs go to 8 GiB
NCCL_TESTS_BINARY = "all_reduce_perf"
CPU_SKIPPED = {BATCH_RUN: "the batch comparison is a GPU measure (the CPU mode trains batches of 2)",
               NCCL_TESTS_RUN: "nccl-tests needs a GPU",
               "torch-ddp-vgg16-amp": "AMP runs on ResNet-50 only (bf16 autocast is slow on CPUs)",
               "torch-ddp-inception_v3-amp": "AMP runs on ResNet-50 only (bf16 autocast is slow on CPUs)",
               "tf-native-ResNet50-mixed": "TensorFlow runs in fp32 only (~40 s of start-up per TF run)"}
DEFAULT_BUDGET_S = {"gpu": 360, "cpu": 900}  # GPU: the last run ends by ~7.5 min
DEFAULT_RUN_TIMEOUT_S = {"gpu": 150, "cpu": 300}
DEFAULT_DEADLINE_S = {"gpu": 470, "cpu": 1500}   # the whole check, hard: a lent machine gives 8 minutes
PROBE_TIMEOUT_S = {"collective": 60, "compute": 120}
# the compute probe's batch, image size, warm-up and timed iterations
PROBE_SIZES = {"gpu": ("64", "224", "5", "10"), "cpu": ("2", "32", "0", "2")}
QUERY_FIELDS = ("index", "name", "pci.bus_id", "driver_version", "memory.total", "clocks.max.sm",
                "clocks.max.memory", "power.limit", "pcie.link.gen.max", "pcie.link.width.max")
CAPTURES = {  # file name -> argv
    "nvidia_smi.txt": probe.COMMANDS["nvidia_smi"],  # the probe's own query, parsed by parse_nvidia_smi
    "nvidia_smi_query.csv": ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv"],
    "nvidia_smi_topo.txt": probe.COMMANDS["nvidia_smi_topo"],
    "nvidia_smi_q.txt": ["nvidia-smi", "-q"],
}
ENV_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, sys
from pathlib import Path
info = {"python": sys.executable, "python_version": sys.version.split()[0]}
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
try:
    import torch
    info["torch"] = torch.__version__
    info["torch_cuda_build"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["gpu_count"] = torch.cuda.device_count()
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    info["nccl_backend"] = torch.distributed.is_available() and torch.distributed.is_nccl_available()
except Exception as exc:
    info["torch"] = None
    info["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    import torchvision
    info["torchvision"] = torchvision.__version__
except Exception as exc:
    info["torchvision"] = None
    info["torchvision_error"] = f"{type(exc).__name__}: {exc}"
info["tensorflow"] = version("tensorflow") or version("tensorflow-cpu")
info["tensorflow_importable"] = importlib.util.find_spec("tensorflow") is not None
spec = importlib.util.find_spec("horovod")
info["horovod"] = version("horovod") if spec else None
if spec and spec.submodule_search_locations:
    package = Path(next(iter(spec.submodule_search_locations)))
    info["horovod_torch"] = any((package / "torch").glob("mpi_lib*.so"))
    info["horovod_tensorflow"] = any((package / "tensorflow").glob("mpi_lib*.so"))
missing = [m for m in ("typer", "rich", "psutil", "scipy") if importlib.util.find_spec(m) is None]
info["launch_cli_missing"] = missing
if not missing and not os.environ.get("GPU_CHECK_FORCE_DIRECT"):
    try:
        import launch.cli.app  # noqa: F401
        info["launch_cli"] = True
    except Exception as exc:
        info["launch_cli"] = False
        info["launch_cli_error"] = f"{type(exc).__name__}: {exc}"
else:
    info["launch_cli"] = False
    if os.environ.get("GPU_CHECK_FORCE_DIRECT"):
        info["launch_cli_error"] = "GPU_CHECK_FORCE_DIRECT is set"
print("GPU_CHECK_ENV " + json.dumps(info))
"""


class Log:
    """Print to the console and to OUT/gpu_check.log."""

    def __init__(self, path: Path):
        self.file = open(path, "w", encoding="utf-8")

    def __call__(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def tool(name: str) -> str | None:
    """A tool beside this Python first (a venv's torchrun), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def discover(log: Log) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-c", ENV_PROBE], capture_output=True, text=True, timeout=180,
                              env=env, cwd=REPO)
        line = next((l for l in proc.stdout.splitlines() if l.startswith("GPU_CHECK_ENV ")), None)
        info: dict[str, Any] = json.loads(line.split(" ", 1)[1]) if line else {"probe_error": proc.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        info = {"probe_error": "probing the Python timed out after 180 s"}
    info["tools"] = {name: tool(name) for name in
                     ("nvidia-smi", "torchrun", "mpirun", "horovodrun", "nvcc", "cmake", "g++", NCCL_TESTS_BINARY)}
    info["cpu_count"] = os.cpu_count()
    info["host"] = os.uname().nodename
    info["pythons_tried"] = os.environ.get("GPU_CHECK_FOUND", "").strip().splitlines()
    log("environment:")
    for key in ("python", "python_version", "torch", "torch_cuda_build", "cuda_available", "gpus", "nccl",
                "torchvision", "tensorflow", "horovod", "horovod_torch", "horovod_tensorflow", "launch_cli",
                "launch_cli_missing", "launch_cli_error", "torch_error", "probe_error"):
        if key in info:
            log(f"  {key}: {info[key]}")
    for name, path in info["tools"].items():
        log(f"  {name}: {path or 'absent'}")
    return info


def capture(mode: str, out: Path, log: Log) -> dict:
    """nvidia-smi outputs under captures/, each with its status; parsed where the probe can."""
    folder = out / "captures"
    folder.mkdir(parents=True, exist_ok=True)
    have = shutil.which("nvidia-smi")
    captures: dict[str, dict] = {}
    for name, argv in CAPTURES.items():
        if mode == "cpu" or not have:
            reason = ("--cpu: the check runs without a GPU" if mode == "cpu" else "") + \
                     ("" if have else ("; " if mode == "cpu" else "") + "nvidia-smi not on PATH")
            captures[name] = {"status": "absent", "reason": reason, "argv": argv}
            (folder / f"{name}.absent").write_text(reason + "\n", encoding="utf-8")
            continue
        result = probe.run_tool(name, argv, timeout_s=60)
        (folder / name).write_text(result.stdout, encoding="utf-8")
        captures[name] = {"status": "ok" if result.status == "ok" else "failed",
                          "reason": None if result.status == "ok" else result.status,
                          "argv": argv, "file": f"captures/{name}"}
    for name, entry in captures.items():
        log(f"capture {name}: {entry['status']}" + (f" ({entry['reason']})" if entry["reason"] else ""))
    parsed: dict = {}
    if captures["nvidia_smi.txt"]["status"] == "ok":
        parsed["gpus"] = [dataclasses.asdict(g) for g in
                          probe.parse_nvidia_smi((folder / "nvidia_smi.txt").read_text())]
    if captures["nvidia_smi_topo.txt"]["status"] == "ok":
        topology = probe.parse_nvidia_smi_topo((folder / "nvidia_smi_topo.txt").read_text())
        if topology:
            parsed["gpu_topology"] = dataclasses.asdict(topology)
            parsed["nearest_nics"] = {f"GPU{g.index}": topology.nearest_nics(g.index) for g in topology.gpus}
    return {"captures": captures, "parsed": parsed}


# The GPU's state as a disturbance record reads it (issue 37): clocks, clock-event reasons and the
# compute processes, taken idle, beside one process's load and beside two; the event reasons under
# both names (clocks_throttle_reasons was renamed clocks_event_reasons in R535; an unknown field
# fails the whole query, so each name is its own capture)
GPU_STATE_FIELDS = ("index", "uuid", "pstate", "clocks.sm", "clocks.max.sm", "clocks.mem", "temperature.gpu",
                    "power.draw", "power.limit", "utilization.gpu", "memory.used")
EVENT_REASONS = ("active", "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                 "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")
GPU_STATE_CAPTURES = {
    "query_gpu_events.csv": ["nvidia-smi", "--query-gpu=" + ",".join(
        GPU_STATE_FIELDS + tuple(f"clocks_event_reasons.{r}" for r in EVENT_REASONS)), "--format=csv"],
    "query_gpu_throttle.csv": ["nvidia-smi", "--query-gpu=" + ",".join(
        GPU_STATE_FIELDS + tuple(f"clocks_throttle_reasons.{r}" for r in EVENT_REASONS)), "--format=csv"],
    "query_compute_apps.csv": ["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid,used_memory",
                               "--format=csv"],
    "q_performance.txt": ["nvidia-smi", "-q", "-d", "PERFORMANCE,CLOCK"],
}
LOAD_SECONDS = 25


def start_load(env: dict, log: Log) -> tuple[subprocess.Popen, int | None]:
    """A process multiplying bf16 matrices on the GPU, and its pid once its first product is done."""
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "gpu_probes.py"), "load", str(LOAD_SECONDS)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    ready: list[int] = []

    def wait_ready() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("GPU_PROBE "):
                ready.append(json.loads(line.split(" ", 1)[1])["pid"])
                return

    waiter = threading.Thread(target=wait_ready, daemon=True)
    waiter.start()
    waiter.join(60)
    how = "ready" if ready else ("exited before its first product" if proc.poll() is not None
                                 else "not ready after 60 s")
    log(f"gpu state: load process {proc.pid} {how}")
    return proc, (ready[0] if ready else None)


def capture_gpu_states(mode: str, info: dict, out: Path, env: dict, log: Log) -> dict:
    """captures/gpu_states/<state>/<capture> for the states idle, one (one load) and two (two loads)."""
    folder = out / "captures" / "gpu_states"
    folder.mkdir(parents=True, exist_ok=True)
    if mode == "cpu" or not shutil.which("nvidia-smi") or not info.get("cuda_available"):
        reason = "--cpu" if mode == "cpu" else "nvidia-smi or a CUDA device is absent"
        (folder / "absent.txt").write_text(reason + "\n", encoding="utf-8")
        log(f"gpu state captures: absent ({reason})")
        return {"status": "absent", "reason": reason}
    loads: list[tuple[subprocess.Popen, int | None]] = []
    states: dict[str, dict] = {}
    try:
        for state in ("idle", "one", "two"):
            if state != "idle":
                loads.append(start_load(env, log))
                time.sleep(3)
            where = folder / state
            where.mkdir(exist_ok=True)
            statuses = {}
            for name, argv in GPU_STATE_CAPTURES.items():
                result = probe.run_tool(name, argv, timeout_s=30)
                (where / name).write_text(result.stdout, encoding="utf-8")
                statuses[name] = result.status
            states[state] = {"captures": statuses, "load_pids": [pid for _, pid in loads],
                             "load_popen_pids": [proc.pid for proc, _ in loads]}
            log(f"gpu state {state}: " + ", ".join(f"{n} {st}" for n, st in statuses.items()))
    finally:
        for proc, _ in loads:
            end_session(proc)
    (folder / "states.json").write_text(json.dumps(states, indent=2) + "\n", encoding="utf-8")
    return {"status": "ok", "states": states}


@dataclasses.dataclass
class Run:
    label: str
    framework: str
    engine: str
    model: str
    precision: str
    needs: str  # what must be present: torch | tf | horovod | mpirun | nccl-tests
    ranks: int = 1  # 2: two ranks share the one GPU (bench.torch_device.SHARED_GPU_ENV)
    batch_size: int | None = None  # None: the mode's (SIZES)
    benchmark: str = "train"  # train | allreduce | nccl-tests


SHARED_GPU_RUN = "torch-ddp-resnet50-fp32-2ranks"


def planned_runs() -> list[Run]:
    """In order of importance: the DDP/NCCL run first, the budget may cut the tail."""
    runs = [Run(f"torch-ddp-{m}-{p}", "torch", "ddp", m, p, "torch") for m in TORCH_MODELS for p in TORCH_PRECISIONS]
    runs.insert(1, Run(SHARED_GPU_RUN, "torch", "ddp", "resnet50", "fp32", "torch", ranks=2))
    runs.insert(2, Run(BATCH_RUN, "torch", "ddp", "resnet50", "fp32", "torch", batch_size=SMALL_BATCH))
    runs.insert(3, Run(ALLREDUCE_RUN, "torch", "torch", "-", "fp32", "mpirun", ranks=2, benchmark="allreduce"))
    runs.insert(4, Run(NCCL_TESTS_RUN, "nccl-tests", "nccl", "-", "fp32", "nccl-tests", benchmark="nccl-tests"))
    runs.insert(5, Run("torch-horovod-resnet50-fp32", "torch", "horovod", "resnet50", "fp32", "horovod"))
    runs += [Run(f"tf-native-{TF_MODEL}-{p}", "tf", "native", TF_MODEL, p, "tf") for p in TF_PRECISIONS]
    return runs


def unavailable(run: Run, info: dict) -> str | None:
    """Why a run cannot start here, or None."""
    if not info.get("torch") and run.framework == "torch":
        return f"torch is not importable by {info.get('python')}: {info.get('torch_error', 'absent')}"
    if run.framework == "torch" and not info.get("torchvision"):
        return f"torchvision is not importable by {info.get('python')} (the models come from it)"
    if run.needs == "horovod":
        if not info.get("horovod"):
            return (f"Horovod is not installed for {info.get('python')}; it cannot be fetched here, and building "
                    "it from its sdist takes ~5-7 min (ENVIRONMENT.md), more than this check's budget")
        if not info.get("horovod_torch"):
            return f"Horovod {info['horovod']} was built without its PyTorch extension"
        if not info.get("launch_cli"):
            return "the launch CLI is not importable, and Horovod needs its launcher (mpirun/horovodrun)"
        if not (info["tools"].get("mpirun") or info["tools"].get("horovodrun")):
            return "neither mpirun nor horovodrun is present to start a Horovod rank"
    if run.needs == "mpirun":
        if not info.get("launch_cli"):
            return "the launch CLI is not importable (the allreduce benchmark starts through it)"
        if not info["tools"].get("mpirun"):
            return "mpirun is absent: the allreduce benchmark's ranks bootstrap over MPI"
    if run.needs == "nccl-tests" and not info["tools"].get(NCCL_TESTS_BINARY):
        return (f"nccl-tests' {NCCL_TESTS_BINARY} is not on PATH (a site builds nccl-tests itself; put its build/ "
                "on PATH to set its figures beside the harness's)")
    if run.framework == "tf":
        if not info.get("tensorflow_importable"):
            return f"TensorFlow is not installed for {info.get('python')} (too large to carry)"
        if not info.get("launch_cli"):
            return "the launch CLI is not importable (TensorFlow runs start through it)"
        if not info["tools"].get("mpirun"):
            return "mpirun is absent: tf.distribute ranks bootstrap over MPI"
    return None


def sizes_for(run: Run, mode: str) -> dict:
    sizes = dict(SIZES[mode])
    if mode == "cpu":
        sizes["image_size"] = CPU_IMAGE_SIZE.get(run.model, sizes["image_size"])
    elif run.batch_size:
        sizes["batch_size"] = run.batch_size
    return sizes


FABRIC_BENCH = [sys.executable, "-c", "import sys; sys.argv[0] = 'fabric-bench'; from launch.cli.app import main; main()"]


def allreduce_argv(run: Run, mode: str, run_dir: Path, timeout_s: float) -> list[str]:
    """The harness's allreduce: torch on device buffers (NCCL) on a GPU, gloo with --cpu."""
    warmup, iters = ("5", "20") if mode == "gpu" else ("1", "3")   # --cpu: prove the path, cheaply
    argv = [*FABRIC_BENCH, "run", "--benchmark", "allreduce", "--backend", run.engine, "--ranks", str(run.ranks),
            "--launcher", "local", "--runtime", "host", "--warmup", warmup, "--iters", iters,
            "--max-bytes", str(ALLREDUCE_MAX_BYTES[mode]), "--results", str(run_dir), "--timeout", str(timeout_s)]
    if mode == "gpu":
        argv += ["--gpus-per-node", "1", "--env", f"{SHARED_GPU_ENV}=1"]
    return argv


def nccl_tests_argv(info: dict, mode: str) -> list[str]:
    """nccl-tests' own conventions: sizes doubling (-f 2) from 8 B, 5 warm-up and 20 timed operations
    back to back per size, in place and out of place, algbw and busbw; one GPU (-g 1)."""
    return [info["tools"][NCCL_TESTS_BINARY], "-b", "8", "-e", str(ALLREDUCE_MAX_BYTES[mode]), "-f", "2",
            "-g", "1", "-w", "5", "-n", "20"]


def fabric_bench_argv(run: Run, mode: str, info: dict, run_dir: Path, timeout_s: float) -> list[str]:
    if run.benchmark == "allreduce":
        return allreduce_argv(run, mode, run_dir, timeout_s)
    sizes = sizes_for(run, mode)
    argv = [*FABRIC_BENCH,
            "run", "--benchmark", "train", "--framework", run.framework, "--engine", run.engine,
            "--model", run.model, "--precision", run.precision, "--ranks", str(run.ranks), "--launcher", "local",
            "--runtime", "host", "--batch-size", str(sizes["batch_size"]), "--warmup", str(sizes["warmup"]),
            "--iters", str(sizes["iters"]), "--batches-per-iter", str(sizes["batches_per_iter"]),
            "--results", str(run_dir), "--timeout", str(timeout_s)]
    if sizes["image_size"]:
        argv += ["--image-size", str(sizes["image_size"])]
    if run.engine == "horovod" and not info["tools"].get("mpirun"):
        argv += ["--controller", "gloo"]
    if mode == "gpu":
        argv += ["--gpus-per-node", "1"]
        if run.engine == "ddp":
            argv += ["--allreduce", "nccl"]
        if run.ranks > 1:
            argv += ["--env", f"{SHARED_GPU_ENV}=1"]
    else:
        argv += ["--env", "CUDA_VISIBLE_DEVICES="]  # a CPU run even where a GPU is present
    return argv


def direct_argv(run: Run, mode: str, info: dict, run_dir: Path) -> list[str]:
    """Without the launch CLI: the bench program itself under torchrun (torch only)."""
    sizes = sizes_for(run, mode)
    starter = ([info["tools"]["torchrun"]] if info["tools"].get("torchrun")
               else [sys.executable, "-m", "torch.distributed.run"])
    argv = starter + ["--standalone", "--nnodes", "1", "--nproc-per-node", str(run.ranks), "--module", "bench.torch_train",
                      "--engine", run.engine, "--model", run.model, "--precision", run.precision,
                      "--batch-size", str(sizes["batch_size"]), "--warmup", str(sizes["warmup"]),
                      "--iters", str(sizes["iters"]), "--batches-per-iter", str(sizes["batches_per_iter"]),
                      "--record-dir", str(run_dir / "ranks")]
    if sizes["image_size"]:
        argv += ["--image-size", str(sizes["image_size"])]
    if mode == "gpu":
        argv += ["--backend", "nccl"]
    return argv


def end_session(proc: subprocess.Popen) -> None:
    """SIGTERM to a process started in its own session and all of it, then SIGKILL if it stays."""
    for signum, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue


def execute(argv: list[str], log_path: Path, env: dict, timeout_s: float, log: Log) -> int:
    """Run one command in its own session, its output to the console, the check's log and log_path;
    past the timeout, output or none: SIGTERM to the whole session (fabric-bench ends its ranks),
    then SIGKILL. A reader thread copies the output, so a silent hang still meets the deadline."""
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=REPO, start_new_session=True, errors="replace")

        def copy_output() -> None:
            assert proc.stdout is not None  # stdout=PIPE above
            for line in proc.stdout:
                out.write(line)
                log.file.write(line)
                print(line, end="", flush=True)
        reader = threading.Thread(target=copy_output, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            log(f"  ... no end after {timeout_s:.0f} s: stopping it")
            code = 124
            end_session(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)
        return code


def run_probes(mode: str, info: dict, out: Path, env: dict, deadline: float, log: Log) -> dict:
    """The collective and compute probes (benchmarks/gpu_probes.py), each under its own timeout
    and the check's deadline; their output kept under probes/."""
    folder = out / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    probes: dict[str, dict] = {}
    for name, extra in (("collective", ()), ("compute", PROBE_SIZES[mode])):
        if not info.get("torch"):
            probes[name] = {"status": "absent", "reason": f"torch is not importable by {info.get('python')}"}
            log(f"probe {name}: absent")
            continue
        left = deadline - time.monotonic()
        if left < 10:
            probes[name] = {"status": "skipped", "reason": "the check's deadline was reached"}
            log(f"probe {name}: skipped (deadline)")
            continue
        timeout_s = min(PROBE_TIMEOUT_S[name], left)
        log(f"probe {name}: (at most {timeout_s:.0f} s)")
        console = folder / f"{name}.log"
        probe_env = {**env, **(NCCL_REPORTING_ENV if mode == "gpu" else {})}
        code = execute([sys.executable, str(REPO / "benchmarks" / "gpu_probes.py"), name, *extra],
                       console, probe_env, timeout_s, log)
        text = console.read_text(errors="replace")
        line = next((l for l in text.splitlines() if l.startswith("GPU_PROBE ")), None)
        entry: dict = json.loads(line.split(" ", 1)[1]) if line else {}
        ok = code == 0 and entry.get("ok", True) and bool(line)
        entry.update(status="ok" if ok else "failed", log=f"probes/{name}.log",
                     reason=None if ok else ("timed out" if code == 124 else f"exit code {code}, no result line"
                                             if not line else f"exit code {code}"))
        if not ok:
            entry["errors"] = why_lines(text, nccl_warnings=True)
        keep_nccl_lines(console, out / "nccl" / f"probe-{name}.log", entry)
        probes[name] = entry
        log(f"probe {name}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else "")
            + (f", {entry['img_per_s']:.1f} img/s compute-only" if entry.get("img_per_s") else ""))
    return probes


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def from_result(result: dict, entry: dict) -> dict:
    """The summary fields of one result.json (launch.results.assemble format)."""
    throughput = result.get("throughput") or {}
    config = (result.get("spec") or {})
    compute = result.get("compute_img_per_s")
    batch, ranks = config.get("batch_size"), result.get("world_size") or 1
    nccl = (((result.get("transport") or {}).get("observed") or {}).get("nccl"))
    entry.update(
        status=result.get("status"), reason=result.get("reason"),
        img_per_s=throughput.get("total_img_per_s"), ci95_img_per_s=throughput.get("ci95_img_per_s"),
        n_samples=throughput.get("n_samples"), compute_img_per_s=compute,
        # launch.results.model.predict_training: compute_step_s = batch x ranks / compute_img_per_s
        compute_step_s=(batch * ranks / compute) if compute and batch else None,
        step_time_s=result.get("step_time_s"), device=result.get("device"),
        engine_info=result.get("engine_info"), versions=result.get("versions"),
        batch_size=batch, image_size=config.get("image_size") or default_image_size(result),
        wall_seconds=result.get("wall_seconds"),
        transport_verdict=(result.get("transport") or {}).get("verdict"), nccl=nccl,
    )
    return entry


def from_allreduce_result(result: dict, entry: dict) -> dict:
    """The summary fields of the harness's allreduce (bench.allreduce): each size's time, algbw and
    busbw as nccl-tests prints them (GB/s, 1e9 bytes), in place and, where measured, out of place."""
    def as_nccl_tests(figures: dict | None) -> dict | None:
        if not figures:
            return None
        return {"time_us": figures.get("time_us"), "algbw_gbyte_s": (figures.get("algbw_gbit_s") or 0) / 8,
                "busbw_gbyte_s": (figures.get("busbw_gbit_s") or 0) / 8, "ops_per_sample": figures.get("ops_per_sample")}

    rows = [{"bytes": row.get("bytes"), "in_place": as_nccl_tests(row),
             "out_of_place": as_nccl_tests(row.get("out_of_place"))} for row in result.get("sizes") or []]
    entry.update(status=result.get("status"), reason=result.get("reason"), device=result.get("device"),
                 backend_info=result.get("backend_info"), versions=result.get("versions"), allreduce=rows,
                 peak_busbw_gbyte_s=max((r["in_place"]["busbw_gbyte_s"] for r in rows), default=None),
                 timing=(result.get("backend_info") or {}).get("timing"),
                 wall_seconds=result.get("wall_seconds"), transport_verdict=(result.get("transport") or {}).get("verdict"),
                 nccl=((result.get("transport") or {}).get("observed") or {}).get("nccl"))
    return entry


def from_nccl_tests(text: str, entry: dict, exit_code: int) -> dict:
    """The summary fields of nccl-tests' all_reduce_perf (launch.results.nccl_tests)."""
    from launch.results import nccl_tests

    parsed = nccl_tests.parse(text)
    ok = exit_code == 0 and bool(parsed["rows"])
    entry.update(status="ok" if ok else "failed",
                 reason=None if ok else f"exit code {exit_code}" + ("" if parsed["rows"] else ", no result rows"),
                 allreduce=[{k: r[k] for k in ("bytes", "in_place", "out_of_place")} for r in parsed["rows"]],
                 peak_busbw_gbyte_s=max((r["in_place"]["busbw_gbyte_s"] or 0 for r in parsed["rows"]), default=None),
                 nccl_tests={k: parsed[k] for k in ("version", "ranks", "warmup", "iters", "avg_busbw_gbyte_s")})
    return entry


def default_image_size(result: dict) -> int | None:
    from bench import catalog  # plain data

    framework, model = result.get("framework"), result.get("model")
    if framework is None or model is None:
        return None
    return catalog.MODELS.get(framework, {}).get(model)


def from_records(records: list[dict], entry: dict, exit_code: int) -> dict:
    """The summary fields of a direct run (no launch CLI): rank 0's train record."""
    train = next((r for r in records if r.get("kind") == "train"), None)
    errors = [r["error"] for r in records if r.get("kind") == "error"]
    if train is None:
        entry.update(status="failed", reason="; ".join(errors) or f"no train record (exit code {exit_code})")
        return entry
    compute = mean(train["compute_samples_img_per_s"])
    batch = train["config"]["batch_size"]
    entry.update(
        status=train["status"] if exit_code == 0 else "failed",
        reason=None if exit_code == 0 else f"exit code {exit_code}",
        img_per_s=mean(train["samples_img_per_s"]), n_samples=len(train["samples_img_per_s"]),
        compute_img_per_s=compute, compute_step_s=batch / compute if compute else None,
        device=train.get("device"), engine_info=train.get("engine_info"), versions=train.get("versions"),
        batch_size=batch, image_size=train["config"].get("image_size"), format="rank records",
    )
    return entry


def check_env(mode: str, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "FABRIC_BENCH_STORE": str(out / "results.sqlite"), "PYTHONUNBUFFERED": "1",
           "KERAS_HOME": str(out / "tmp" / "keras"), "MPLCONFIGDIR": str(out / "tmp" / "matplotlib")}
    if mode == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_all(mode: str, info: dict, out: Path, budget_s: float, run_timeout_s: float, log: Log,
            started: float, full: bool = False, only: set[str] | None = None,
            deadline: float = float("inf")) -> list[dict]:
    env = check_env(mode, out)
    entries = []
    for run in planned_runs():
        if only and run.label not in only:
            continue
        entry = {"label": run.label, "framework": run.framework, "engine": run.engine, "model": run.model,
                 "precision": run.precision, "ranks": run.ranks}
        entries.append(entry)
        why = unavailable(run, info)
        elapsed = time.monotonic() - started
        if mode == "cpu" and not full and run.label in CPU_SKIPPED and not why:
            entry.update(status="skipped", reason=f"--cpu: {CPU_SKIPPED[run.label]}; --full runs every model "
                                                  "in both precisions")
            log(f"run {run.label}: skipped ({entry['reason']})")
            continue
        if why:
            entry.update(status="absent", reason=why)
            log(f"run {run.label}: absent ({why})")
            continue
        if elapsed > budget_s or deadline - time.monotonic() < 30:
            entry.update(status="skipped", reason=f"the check's budget of {budget_s:.0f} s (or its hard deadline) "
                                                  f"was spent ({elapsed:.0f} s elapsed)")
            log(f"run {run.label}: skipped ({entry['reason']})")
            continue
        run_dir = out / "runs" / run.label
        run_dir.mkdir(parents=True, exist_ok=True)
        timeout_s = min(run_timeout_s, max(30.0, budget_s + 60 - elapsed), deadline - time.monotonic() - 25)
        if run.benchmark == "nccl-tests":   # nccl-tests' own binary, its own conventions
            argv, run_env, console = nccl_tests_argv(info, mode), env, run_dir / "all_reduce_perf.out"
            log(f"run {run.label}: {' '.join(argv)}")
            code = execute(argv, console, run_env, min(timeout_s, deadline - time.monotonic()), log)
            from_nccl_tests(console.read_text(errors="replace"), entry, code)
            log(f"run {run.label}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else ""))
            continue
        if info.get("launch_cli"):
            argv, run_env = fabric_bench_argv(run, mode, info, run_dir, timeout_s), env
            console = run_dir / "fabric-bench.out"
            log(f"run {run.label}: fabric-bench {' '.join(argv[3:])}")
        else:  # launch's own reporting variables, as fabric-bench would set them
            shutil.rmtree(run_dir / "ranks", ignore_errors=True)  # records append: none from an earlier check
            argv, console = direct_argv(run, mode, info, run_dir), run_dir / "output.log"
            run_env = {**env, **(NCCL_REPORTING_ENV if mode == "gpu" else {})}
            log(f"run {run.label}: {' '.join(argv)}")
        t0 = time.monotonic()
        before = set(run_dir.glob("*/result.json"))  # an --out used before keeps its earlier runs
        code = execute(argv, console, run_env, min(timeout_s + 60, deadline - time.monotonic()), log)
        results = sorted(set(run_dir.glob("*/result.json")) - before)
        if info.get("launch_cli") and results and run.benchmark == "allreduce":
            from_allreduce_result(json.loads(results[-1].read_text()), entry)
            entry["result"] = str(results[-1].relative_to(out))
            run_log = results[-1].parent / "output.log"
        elif info.get("launch_cli") and results:
            from_result(json.loads(results[-1].read_text()), entry)
            entry["result"] = str(results[-1].relative_to(out))
            run_log = results[-1].parent / "output.log"
        elif info.get("launch_cli"):
            entry.update(status="failed", reason=f"fabric-bench wrote no result.json (exit code {code}); "
                                                 f"see runs/{run.label}/fabric-bench.out")
            run_log = run_dir / "fabric-bench.out"
        else:
            from bench.record import read_records
            from_records(read_records(run_dir / "ranks"), entry, code)
            run_log = run_dir / "output.log"
            nccl_seen = transport.observe(run_log.read_text(errors="replace")).get("nccl")
            entry["nccl"] = nccl_seen
        entry.setdefault("wall_seconds", time.monotonic() - t0)
        if entry.get("status") != "ok" and run_log.exists():
            entry["errors"] = why_lines(run_log.read_text(errors="replace"))
        keep_nccl_lines(run_log, out / "nccl" / f"{run.label}.log", entry)
        log(f"run {run.label}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else "")
            + (f", {entry['img_per_s']:.1f} img/s, compute-only {entry['compute_img_per_s']:.1f} img/s"
               if entry.get("img_per_s") and entry.get("compute_img_per_s") else ""))
    return entries


def why_lines(text: str, nccl_warnings: bool = False) -> list[str]:
    """The last three lines of a step's output that say why it failed: exceptions raised, the
    bench programs' own `error:` lines (bench.train_args.fail), and NCCL's WARN lines if asked."""
    lines = text.splitlines()
    own = [line for line in lines if re.match(r"(\[[^\]]*\]\s*)?error: ", line)]
    raised = [line for line in lines if re.search(r"\w(Error|Exception): ", line)
              and "torch.distributed.elastic" not in line]
    warned = [line for line in lines if nccl_warnings and "NCCL WARN" in line]
    return [line.strip()[:300] for line in (raised + own + warned)[-3:]]


def keep_nccl_lines(log_path: Path, target: Path, entry: dict) -> None:
    if not log_path.exists():
        return
    lines = [l for l in log_path.read_text(errors="replace").splitlines() if "NCCL" in l]
    if lines:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        entry["nccl_log"] = str(target.relative_to(target.parents[1]))


def fmt(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def write_summary(out: Path, mode: str, info: dict, captured: dict, entries: list[dict], seconds: float,
                  probes: dict | None = None) -> dict:
    compute_steps = {f"{e['model']} {e['precision']} ({e['framework']})": e["compute_step_s"]
                     for e in entries if e.get("compute_step_s") and e["engine"] != "horovod"
                     and e["label"] != BATCH_RUN
                     and e.get("ranks", 1) == 1}  # the predictor's step: one rank alone on its GPU
    failed = [e["label"] for e in entries if e.get("status") not in ("ok", "absent", "skipped")]
    failed += [f"probe-{name}" for name, p in (probes or {}).items() if p.get("status") == "failed"]
    summary = {
        "schema_version": 1, "mode": mode, "seconds": seconds, "host": info.get("host"),
        "python": info.get("python"), "environment": "environment.json",
        "captures": captured["captures"], **captured["parsed"], "gpu_states": captured.get("gpu_states"),
        "probes": probes or {}, "runs": entries, "compute_step_s": compute_steps,
        "counts": {s: sum(1 for e in entries if e.get("status") == s)
                   for s in ("ok", "failed", "transport_mismatch", "absent", "skipped")},
        "failed": failed,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    lines = [f"# GPU check ({mode} mode) on {info.get('host')}", "",
             f"Python {info.get('python')} ({info.get('python_version')}), torch {info.get('torch')}, "
             f"CUDA available: {info.get('cuda_available')}, GPUs: {', '.join(info.get('gpus') or []) or 'none'}, "
             f"NCCL {info.get('nccl') or '-'}, torchvision {info.get('torchvision')}, "
             f"TensorFlow {info.get('tensorflow')}, Horovod {info.get('horovod')}; {seconds:.0f} s in all.", "",
             "| run | status | img/s | ±95 % | compute-only img/s | compute step (ms) | batch x size | device |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for e in entries:
        lines.append(f"| {e['label']} | {e.get('status')} | {fmt(e.get('img_per_s'), '.1f')} | "
                     f"{fmt(e.get('ci95_img_per_s'), '.1f')} | {fmt(e.get('compute_img_per_s'), '.1f')} | "
                     f"{fmt((e.get('compute_step_s') or 0) * 1e3 or None, '.1f')} | "
                     f"{e.get('batch_size') or '-'} x {e.get('image_size') or '-'} | {e.get('device') or '-'} |")
    reasons = [f"- {e['label']}: {e['reason']}" + (f" (log: `{e['errors'][-1]}`)" if e.get("errors") else "")
               for e in entries if e.get("reason")]
    lines += ["", "Probes:"]
    lines += [f"- {name}: {p.get('status')}" + (f" ({p['reason']})" if p.get("reason") else "")
              + (f", {p['img_per_s']:.1f} img/s compute-only on {p.get('device')}" if p.get("img_per_s") else "")
              + (f", {p.get('backend')} on {p.get('device')} in {p['seconds']} s" if p.get("seconds") is not None else "")
              for name, p in (probes or {}).items()]
    lines += ["", "Not run, or not ok:" if reasons else "All runs ok.", *reasons, "", "Captures:"]
    lines += [f"- {name}: {c['status']}" + (f" ({c['reason']})" if c.get("reason") else "")
              for name, c in captured["captures"].items()]
    side = [e for e in entries if e.get("allreduce")]
    if side:   # the harness's allreduce beside nccl-tests' (same conventions; GB/s as nccl-tests prints)
        lines += ["", "Allreduce, the harness beside nccl-tests (largest sizes; GB/s):", "",
                  "| run | bytes | in place us | algbw | busbw | out of place us | algbw | busbw |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for e in side:
            for row in e["allreduce"][-4:]:
                ip, oop = row.get("in_place") or {}, row.get("out_of_place") or {}
                lines.append(f"| {e['label']} | {row['bytes']} | {fmt(ip.get('time_us'), '.1f')} | "
                             f"{fmt(ip.get('algbw_gbyte_s'), '.2f')} | {fmt(ip.get('busbw_gbyte_s'), '.2f')} | "
                             f"{fmt(oop.get('time_us'), '.1f')} | {fmt(oop.get('algbw_gbyte_s'), '.2f')} | "
                             f"{fmt(oop.get('busbw_gbyte_s'), '.2f')} |")
    batches = [e for e in entries if e["label"] in ("torch-ddp-resnet50-fp32", BATCH_RUN) and e.get("img_per_s")]
    if len(batches) == 2:
        lines += ["", "Batch per GPU, ResNet-50 fp32 on one GPU: " + ", ".join(
            f"batch {e.get('batch_size')}: {e['img_per_s']:.1f} img/s" for e in batches)]
    nccl = [(e["label"], e["nccl"]) for e in entries if e.get("nccl")]
    if nccl:
        lines += ["", "NCCL seen (launch.results.transport):"]
        lines += [f"- {label}: network {', '.join(n['network']) or '-'}, version {n['version']}, "
                  f"channels {', '.join(n['channels']) or 'none (1 rank)'}" for label, n in nccl]
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/gpu_check.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="no GPU: tiny sizes, gloo, nvidia-smi captures absent")
    p.add_argument("--out", type=Path, default=None, help="output folder (default results/gpu-check-<UTC time>)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no run after this many seconds (default 360 on a GPU, 900 with --cpu)")
    p.add_argument("--run-timeout-s", type=float, default=None, help="kill one run after this (150 / 300)")
    p.add_argument("--archive", type=Path, default=None, help="also write the output folder as this .tar.gz")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="end the whole check after this many seconds, writing the summary (470 / 1500)")
    p.add_argument("--full", action="store_true", help="with --cpu: every model in both precisions")
    p.add_argument("--only", default=None, help="comma list of run labels to run (see summary.md), e.g. "
                                                "torch-ddp-resnet50-fp32")
    args = p.parse_args(argv)
    mode = "cpu" if args.cpu else "gpu"
    only = {label for label in (args.only or "").split(",") if label}
    unknown = only - {run.label for run in planned_runs()}
    if unknown:
        p.error(f"unknown run label(s) {', '.join(sorted(unknown))}; "
                f"choose from {', '.join(run.label for run in planned_runs())}")
    out = (args.out or REPO / "results" / time.strftime("gpu-check-%Y%m%dT%H%M%SZ", time.gmtime())).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "tmp").mkdir(exist_ok=True)
    log = Log(out / "gpu_check.log")
    started = time.monotonic()
    log(f"gpu_check: {mode} mode, output under {out}")
    for line in os.environ.get("GPU_CHECK_FOUND", "").strip().splitlines():
        log(f"  {line}")
    info = discover(log)
    (out / "environment.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if mode == "gpu" and info.get("torch") and not info.get("cuda_available"):
        log("gpu_check: torch sees no CUDA device here; the runs go ahead on what there is (try --cpu)")
    deadline = started + (args.deadline_s or DEFAULT_DEADLINE_S[mode])
    captured = capture(mode, out, log)
    try:
        gpu_states = capture_gpu_states(mode, info, out, check_env(mode, out), log)
    except Exception as exc:  # the captures are an extra: the runs go ahead without them
        gpu_states = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        log(f"gpu state captures: failed ({gpu_states['reason']})")
    probes = run_probes(mode, info, out, check_env(mode, out), deadline, log)
    entries = run_all(mode, info, out, args.budget_s or DEFAULT_BUDGET_S[mode],
                      args.run_timeout_s or DEFAULT_RUN_TIMEOUT_S[mode], log, started, args.full, only, deadline)
    captured["gpu_states"] = gpu_states
    summary = write_summary(out, mode, info, captured, entries, time.monotonic() - started, probes)
    shutil.rmtree(out / "tmp", ignore_errors=True)
    log((out / "summary.md").read_text())
    if args.archive:
        archive = args.archive.resolve()
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(out, arcname=out.name, filter=lambda m: None if m.name.endswith(archive.name) else m)
        log(f"gpu_check: archive {archive}")
    log(f"gpu_check: summary {out / 'summary.md'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
