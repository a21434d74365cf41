"""What this Python and this host offer the GPU check (benchmarks/gpu_check.py): torch, CUDA,
NCCL, torchvision, TensorFlow, Horovod, whether the launch CLI imports, and the tools on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu_check_plan import NCCL_TESTS_BINARY
from benchmarks.gpu_check_process import REPO, Log

# Modules the check looks for beside torch, each with what its absence costs the check, and
# those the launch CLI cannot do without
WITHOUT_MODULE = {
    "typer": "the launch CLI has no command line",
    "rich": "the launch CLI has no console",
    "psutil": "the launch CLI cannot watch its ranks",
    "scipy": "the launch CLI cannot load (the bench programs' statistics need none)",
    "pydantic": "the launch CLI cannot load its typed configs and results (the summary is read from rank records)",
    "mpi4py": "no run bootstraps over MPI (the allreduce starts under torchrun, torch backend)",
}
MODULES = tuple(WITHOUT_MODULE)
LAUNCH_CLI_NEEDS = ("typer", "rich", "psutil", "scipy", "pydantic")
ENV_PROBE = (
    f"MODULES, LAUNCH_CLI_NEEDS = {MODULES!r}, {LAUNCH_CLI_NEEDS!r}\n"
    + r"""
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
info["modules"] = {m: importlib.util.find_spec(m) is not None for m in MODULES}
missing = [m for m in LAUNCH_CLI_NEEDS if not info["modules"][m]]
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
)


def tool(name: str) -> str | None:
    """A tool beside this Python first (a venv's torchrun), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def discover(log: Log, timeout_s: float = 180) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", ENV_PROBE], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO
        )
        line = next((l for l in proc.stdout.splitlines() if l.startswith("GPU_CHECK_ENV ")), None)
        info: dict[str, Any] = json.loads(line.split(" ", 1)[1]) if line else {"probe_error": proc.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        info = {"probe_error": f"probing the Python timed out after {timeout_s:.0f} s"}
    info.setdefault("python", sys.executable)
    info["tools"] = {
        name: tool(name)
        for name in (
            "nvidia-smi",
            "torchrun",
            "mpirun",
            "horovodrun",
            "apptainer",
            "nvcc",
            "cmake",
            "g++",
            NCCL_TESTS_BINARY,
        )
    }
    info["cpu_count"] = os.cpu_count()
    info["host"] = os.uname().nodename
    info["pythons_tried"] = os.environ.get("GPU_CHECK_FOUND", "").strip().splitlines()
    log("environment:")
    for key in (
        "python",
        "python_version",
        "torch",
        "torch_cuda_build",
        "cuda_available",
        "gpus",
        "nccl",
        "torchvision",
        "tensorflow",
        "horovod",
        "horovod_torch",
        "horovod_tensorflow",
        "modules",
        "launch_cli",
        "launch_cli_missing",
        "launch_cli_error",
        "torch_error",
        "probe_error",
    ):
        if key in info:
            log(f"  {key}: {info[key]}")
    for name, path in info["tools"].items():
        log(f"  {name}: {path or 'absent'}")
    return info


def absent_parts(info: dict) -> list[dict]:
    """What this host cannot do, each part with why (the runs' own absent lines name theirs)."""
    python, have = info.get("python"), info.get("modules") or {}
    out = []
    if not info.get("launch_cli"):
        missing = info.get("launch_cli_missing") or []
        why = f"{', '.join(missing)} not importable by {python}" if missing else info.get("launch_cli_error", "")
        out.append(
            {
                "part": "launch CLI",
                "reason": f"{why}: torch runs start their bench programs under torchrun and are summarised from "
                "their rank records; Horovod and TensorFlow runs need it",
            }
        )
    if info.get("torch") and not info.get("torchvision"):
        out.append(
            {
                "part": "torchvision",
                "reason": f"not importable by {python}: no model to train (the training runs and the compute "
                "probe are absent)",
            }
        )
    if "modules" in info:  # the environment probe ran: what it did not find is named
        out += [
            {"part": name, "reason": f"not importable by {python}: {why}"}
            for name, why in WITHOUT_MODULE.items()
            if not have.get(name)
        ]
    for name, why in (
        ("mpirun", "Horovod's MPI controller and TensorFlow's ranks cannot start"),
        ("apptainer", "the check runs on the host: no image is run"),
    ):
        if not info.get("tools", {}).get(name):
            out.append({"part": name, "reason": f"not on PATH: {why}"})
    return out
