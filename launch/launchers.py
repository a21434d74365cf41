"""Launchers: turn a RunSpec into the Command that starts all its ranks.

`local` starts N ranks on this host: Horovod under `mpirun` (MPI controller) or
`horovodrun --gloo`, DDP and tf.distribute under `torchrun`-style launchers.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from launch.command import Command
from launch.runspec import RunSpec

BENCH_MODULES = {("train", "torch"): "bench.torch_train", ("train", "tf"): "bench.tf_train"}


def tool_path(name: str) -> str:
    """A launcher tool from this Python's environment first (venv bin), else PATH.

    A tool found nowhere stays a bare name, so a dry run can still show the
    command; preflight refuses to execute it.
    """
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name) or name


def rank_env(spec: RunSpec) -> dict[str, str]:
    """Environment every rank gets: one CPU share each, plus the user's overrides."""
    env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // spec.ranks)), "PYTHONUNBUFFERED": "1"}
    if os.geteuid() == 0:  # Open MPI refuses root without both
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(spec.extra_env)
    return env


def local_command(spec: RunSpec, record_dir: Path, python: str = sys.executable) -> Command:
    module = BENCH_MODULES[(spec.benchmark, spec.framework)]
    program = [python, "-m", module, *spec.bench_args(), "--record-dir", str(record_dir)]
    env = rank_env(spec)
    n = str(spec.ranks)
    if spec.engine == "horovod" and spec.controller == "mpi":
        argv = [tool_path("mpirun"), "-np", n, "--bind-to", "none", "--map-by", "slot"]
        if spec.ranks > (os.cpu_count() or 1):
            argv.append("--oversubscribe")
        for name in sorted(env):
            argv += ["-x", name]
        return Command(argv + program, env)
    if spec.engine == "horovod":
        argv = [tool_path("horovodrun"), "-np", n, "-H", f"localhost:{n}", "--gloo"]
        return Command(argv + program, env)
    # ddp and tf native: torchrun starts the ranks and sets RANK/WORLD_SIZE/MASTER_*
    torchrun = [tool_path("torchrun"), "--standalone", "--nnodes", "1", "--nproc-per-node", n, "--module"]
    return Command(torchrun + program[2:], env)
