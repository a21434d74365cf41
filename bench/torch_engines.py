"""The two PyTorch data-parallel engines behind one small interface.

An engine starts the process group, wraps model and optimizer so that gradients
are averaged across ranks, and offers the two collectives the benchmark itself
needs (barrier, broadcast). Everything else in the benchmark is engine-blind.

`stop()` ends the engine (Horovod's background thread, the process group)
before the step without exchange is timed, so nothing of the engine competes
with it for the cores; what the engine reported about itself is kept for the
record, and the final `shutdown()` is then a no-op.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Protocol, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.amp import GradScaler
from torch.optim import Optimizer

from bench.rendezvous import discover, export_for_torch
from bench import horovod_settings
from bench.torch_device import collective_device, name_rank_a_host_for_nccl, on_gpu, rank_device
from bench.train_args import fail


class DistributedOptimizer(Protocol):
    """What hvd.DistributedOptimizer adds to the optimizer it wraps (Horovod has no types)."""

    def synchronize(self) -> None: ...

    def skip_synchronize(self) -> contextlib.AbstractContextManager[object]: ...


class HorovodEngine:
    name = "horovod"

    def __init__(self, args: argparse.Namespace):
        on_gpu(getattr(args, "record_dir", None))  # GPUs asked for and none seen: one line, before Horovod starts
        try:
            import horovod.torch as hvd
        except ImportError as exc:
            fail(f"Horovod is not built with PyTorch support here ({exc}); rebuild it with `make setup`")
        horovod_settings.apply_tuning(args)
        self.hvd = hvd
        self.fp16_allreduce = args.fp16_allreduce
        self.info: dict | None = None  # set when stopped
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def wrap(self, model: nn.Module, optimizer: Optimizer) -> tuple[nn.Module, Optimizer]:
        hvd = self.hvd
        compression = hvd.Compression.fp16 if self.fp16_allreduce else hvd.Compression.none
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(), compression=compression
        )
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def step(self, optimizer: Optimizer, scaler: GradScaler | None) -> None:
        if scaler is None:
            optimizer.step()
            return
        distributed = cast(DistributedOptimizer, optimizer)  # what wrap() returned
        distributed.synchronize()  # the allreduce must finish before unscaling
        scaler.unscale_(optimizer)
        with distributed.skip_synchronize():
            scaler.step(optimizer)
        scaler.update()

    def barrier(self) -> None:
        self.hvd.allreduce(torch.zeros(1), name="barrier")

    def stop(self) -> None:
        """Join Horovod's background thread, every rank after the same barrier."""
        self.info = self.describe()
        self.barrier()
        self.hvd.shutdown()

    def broadcast(self, tensor: Tensor) -> Tensor:
        return self.hvd.broadcast(tensor, root_rank=0, name="param_check")

    def describe(self) -> dict:
        if self.info is not None:  # stopped: hvd can no longer answer
            return self.info
        return horovod_settings.describe(self.hvd, self.fp16_allreduce)

    def shutdown(self) -> None:
        if self.info is None:
            self.hvd.shutdown()


class DDPEngine:
    name = "ddp"

    def __init__(self, args: argparse.Namespace):
        peers = discover()
        export_for_torch(peers)  # torchrun's variables, or found over MPI
        name_rank_a_host_for_nccl(peers.rank)
        gpu = on_gpu(getattr(args, "record_dir", None))  # GPUs asked for and none seen: one line, never gloo on the CPU
        self.backend = args.backend or ("nccl" if gpu else "gloo")
        if self.backend == "nccl" and not gpu:
            fail("the nccl backend needs a GPU; use --backend gloo on CPUs")
        self.bucket_cap_mb = args.bucket_cap_mb
        dist.init_process_group(backend=self.backend)
        self.stopped = False
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        world = dist.group.WORLD
        assert world is not None  # init_process_group made it
        self.collective_device = collective_device(world, self.local_rank)

    def wrap(self, model: nn.Module, optimizer: Optimizer) -> tuple[nn.Module, Optimizer]:
        device = rank_device(self.local_rank)
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, bucket_cap_mb=self.bucket_cap_mb
        )  # DDP broadcasts rank 0's parameters and buffers at construction
        return ddp, optimizer

    def step(self, optimizer: Optimizer, scaler: GradScaler | None) -> None:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()

    def barrier(self) -> None:
        dist.barrier()

    def stop(self) -> None:
        dist.barrier()  # every rank leaves together, to time the exchange-free step at once
        dist.destroy_process_group()
        self.stopped = True

    def broadcast(self, tensor: Tensor) -> Tensor:
        """Rank 0's `tensor`, on the tensor's own device: the collective itself runs on a
        device the group has a backend for (NCCL registers cuda only: a CPU tensor fails)."""
        on_wire = tensor.to(self.collective_device)
        dist.broadcast(on_wire, src=0)
        return on_wire.to(tensor.device)

    def describe(self) -> dict:
        return {"backend": self.backend, "bucket_cap_mb": self.bucket_cap_mb}

    def shutdown(self) -> None:
        if not self.stopped:
            dist.destroy_process_group()


TorchEngine = HorovodEngine | DDPEngine
ENGINES: dict[str, type[TorchEngine]] = {"horovod": HorovodEngine, "ddp": DDPEngine}
