"""The software a run used: `pip freeze` and the MPI, UCX, libfabric and NCCL
versions, asked on the host or inside an image through its runtime.

Each tool's answer is kept verbatim with its argv and status (ok | absent |
failed: ...); `versions` are parsed from those answers. NCCL's version comes
from the framework (torch links its own NCCL) in a subprocess: launch never
imports torch.
"""

from __future__ import annotations

import re
import subprocess
import sys

from launch.ranks.runtimes import Runtime
from launch.shapes import ImageRef

NCCL_PROBE = (
    "import torch\n"
    "v = torch.cuda.nccl.version() if torch.cuda.is_available() or torch.version.cuda else None\n"
    "print('nccl', '.'.join(map(str, v)) if isinstance(v, tuple) else v)"
)


def commands(python: str) -> dict[str, list[str]]:
    return {
        "pip_freeze": [python, "-m", "pip", "freeze", "--all"],
        "python": [python, "--version"],
        "mpirun": ["mpirun", "--version"],
        "ucx_info": ["ucx_info", "-v"],
        "fi_info": ["fi_info", "--version"],
        "nccl": [python, "-c", NCCL_PROBE],
    }


VERSION_PATTERNS = {
    "openmpi": ("mpirun", re.compile(r"Open MPI\)?\s+(\d+\.\d+\.\d+\S*)")),
    "mpich": ("mpirun", re.compile(r"HYDRA.*?Version:\s+(\S+)", re.S)),
    "ucx": ("ucx_info", re.compile(r"^# (?:Library )?[Vv]ersion:? (\d\S*)", re.M)),
    "libfabric": ("fi_info", re.compile(r"libfabric:\s+(\S+)")),
    "nccl": ("nccl", re.compile(r"^nccl (\d[\d.]*)", re.M)),
    "python": ("python", re.compile(r"Python (\S+)")),
}


def _run(argv: list[str], timeout: float) -> dict:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return {"argv": argv, "status": "absent", "output": ""}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"argv": argv, "status": f"failed: {exc}", "output": ""}
    text = out.stdout + (out.stderr if out.returncode else "")
    status = "ok" if out.returncode == 0 else f"failed: exit {out.returncode}"
    if out.returncode == 127 or "executable file not found" in out.stderr:
        status = "absent"
    return {"argv": argv, "status": status, "output": text[-200_000:]}


def versions(answers: dict[str, dict]) -> dict[str, str]:
    found = {}
    for name, (tool, pattern) in VERSION_PATTERNS.items():
        answer = answers.get(tool) or {}
        match = pattern.search(answer.get("output", "")) if answer.get("status") == "ok" else None
        if match:
            found[name] = next(g for g in match.groups() if g)
    return found


def capture(runtime: Runtime | None = None, image: ImageRef | None = None, timeout: float = 180.0) -> dict:
    """Ask every tool, on the host (runtime None or host) or inside `image`."""
    inside = runtime is not None and runtime.containerised and bool(image)
    python = "python3" if inside else sys.executable
    answers = {}
    for name, argv in commands(python).items():
        full = runtime.wrap(image, [], {}, False, argv) if runtime and image and inside else argv
        answers[name] = _run(full, timeout)
    where = f"{runtime.name}:{image}" if runtime and inside else "host"
    return {"where": where, "versions": versions(answers), "tools": answers}
