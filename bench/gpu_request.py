"""Whether a run asked for GPUs, and what a rank does when its framework disagrees.

The launcher tells every rank how many GPUs per node the run asked for
(FABRIC_BENCH_GPUS_PER_NODE, set by launch.ranks.launchers.rank_env from the RunSpec):
- asked for GPUs, and the framework sees none (a broken driver, a CUDA build that
  does not match it, a missing `--nv`): the rank refuses in one line, exit 2, and
  writes that line as its error record. Silently falling back to gloo on the CPU
  would pass the run on ethernet as if the GPUs had trained.
- asked for none (gpus_per_node = 0): the rank computes on the CPU even where the
  framework sees a GPU (the launcher also hides them: CUDA_VISIBLE_DEVICES=-1).
- no request at all (a bench program started by hand, the GPU check's direct
  runs): whatever the framework sees, as before.
"""

from __future__ import annotations

import os
from typing import Mapping, NoReturn

from bench.record import write_record
from bench.train_args import fail

GPUS_REQUESTED_ENV = "FABRIC_BENCH_GPUS_PER_NODE"
# where each launcher puts a rank's number before the framework knows it (torchrun, Open MPI, PMIx, Slurm)
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def gpus_requested(env: Mapping[str, str] = os.environ) -> int | None:
    """GPUs per node the launcher asked for; None where no launcher said."""
    value = env.get(GPUS_REQUESTED_ENV, "").strip()
    return int(value) if value.isdigit() else None


def launcher_rank(env: Mapping[str, str] = os.environ) -> int:
    for name in RANK_VARIABLES:
        if env.get(name, "").strip().isdigit():
            return int(env[name])
    return 0


def use_gpu(framework: str, seen: int, record_dir: str | None = None, env: Mapping[str, str] = os.environ) -> bool:
    """Whether this rank computes on a GPU, given the `seen` GPUs its framework reports."""
    requested = gpus_requested(env)
    if requested is None:
        return seen > 0
    if requested == 0:
        return False
    if seen == 0:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        message = (
            f"the run asked for {requested} GPU{'s' if requested != 1 else ''} per node but {framework} "
            f"sees none here (CUDA_VISIBLE_DEVICES={'unset' if visible is None else repr(visible)}): "
            f"refusing to run on the CPU; check the driver, the image's CUDA and the runtime's GPU flag"
        )
        refuse(message, record_dir, env)
    return True


def refuse(message: str, record_dir: str | None = None, env: Mapping[str, str] = os.environ) -> NoReturn:
    """End this rank in one line (exit 2), the line also its error record for the run's result."""
    if record_dir:
        write_record(record_dir, launcher_rank(env), "error", error=message)
    fail(message)
