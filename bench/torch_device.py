"""Which CUDA device a torch rank uses, and which device its collectives run on.

Sites hand GPUs to ranks two ways: every rank sees the node's GPUs and picks its
local rank's (mpirun, torchrun, srun --gpus-per-node), or each rank sees one GPU
only (srun --gpus-per-task, --gpu-bind): there, local rank 3 must take device 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, MutableMapping

import torch

from bench.gpu_request import use_gpu
from bench import placement
from bench.placement import SHARED_GPU_ENV

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def gpu_index(local_rank: int, visible_gpus: int) -> int:
    """This rank's device among the `visible_gpus` it can see."""
    return local_rank % max(1, visible_gpus)


def gpus_seen() -> int:
    """The CUDA devices torch can use here (0 where CUDA is unusable)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def on_gpu(record_dir: str | None = None) -> bool:
    """Whether this rank computes on a GPU (bench.gpu_request: the run's request decides, and a
    request torch cannot meet ends the rank in one line)."""
    return use_gpu("torch", gpus_seen(), record_dir)


def rank_device(local_rank: int) -> torch.device:
    """The device this rank computes on (made current), or the CPU where the run asked for none
    (or, started by hand, where no GPU is visible)."""
    if not on_gpu():
        return torch.device("cpu")
    index = gpu_index(local_rank, torch.cuda.device_count())
    torch.cuda.set_device(index)
    # on the CPUs next to this GPU before any worker thread starts (bench.placement.pin_near_gpu)
    placement.pin_near_gpu(placement.gpu_placement(local_rank))
    return torch.device("cuda", index)


def collective_device(group: ProcessGroup, local_rank: int) -> torch.device:
    """The device a tensor must be on for `group`'s collectives: the CPU where the group has a
    backend for it (gloo), else this rank's GPU (NCCL registers for cuda only; a CPU tensor
    there fails with "No backend type associated with device type cpu")."""
    if "cpu" in {torch.device(t).type for t in group._device_types}:
        return torch.device("cpu")
    return torch.device("cuda", gpu_index(local_rank, torch.cuda.device_count()))


def name_rank_a_host_for_nccl(rank: int, env: MutableMapping[str, str] | None = None) -> None:
    """With FABRIC_BENCH_SHARED_GPU=1 (the GPU check's 2-rank run on a one-GPU machine), each rank
    tells NCCL it is a host of its own (NCCL_HOSTID): NCCL refuses two ranks of one host on one
    device ("Duplicate GPU detected"), and as separate hosts their traffic takes NCCL's network
    transport, the path a multi-node run uses."""
    import os

    env = os.environ if env is None else env
    if env.get(SHARED_GPU_ENV) == "1":
        env["NCCL_HOSTID"] = f"fabric-bench-shared-gpu-rank{rank}"
