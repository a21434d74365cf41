"""PyTorch synthetic-data data-parallel training benchmark (Horovod or DDP).

    python -m bench.torch_train --engine ddp --model resnet18 --record-dir DIR

Every rank trains the same torchvision model on synthetic data created once on
its device; the engine is the only difference between runs. Each rank writes a
`train` record (see bench.record) with its per-iteration img/s, the img/s of the
same step without gradient exchange (for the communication share; timed after
the engine has stopped, so none of its threads competes), and a check that its
parameters equal rank 0's at the end of training.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Protocol

from bench import numerics, train_args
from bench.record import errors_recorded
from bench.progress import Progress
from bench.timing import timed_iterations
from bench.train_record import finish
from bench.versions import common_versions, package_version

if TYPE_CHECKING:  # torch itself is imported in main(), where the benchmark runs
    from torch import Tensor, memory_format, nn
    from torch import device as Device
    from torch.amp import GradScaler
    from torch.optim import Optimizer

    from bench.torch_engines import TorchEngine


class InceptionOutputs(Protocol):
    """What inception_v3 returns in train mode (torchvision's namedtuple)."""

    logits: Tensor
    aux_logits: Tensor | None


Step = Callable[["Optimizer", "GradScaler | None"], None]
"""Applies a batch's gradients: the engine's step (which exchanges them) or a local one."""


def build_parser() -> argparse.ArgumentParser:
    p = train_args.parser("torch")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP gradient bucket size")
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="DDP process-group backend (default: nccl on GPU, gloo on CPU)",
    )
    return p


def make_model(torchvision: ModuleType, name: str) -> nn.Module:
    constructor = getattr(torchvision.models, name)
    if name == "inception_v3":
        return constructor(weights=None, aux_logits=True, init_weights=True)
    return constructor(weights=None)


def loss_of(output: Tensor | InceptionOutputs, labels: Tensor, criterion: nn.Module) -> Tensor:
    # inception_v3 in train mode returns (logits, aux_logits), a namedtuple; the aux head
    # is weighted 0.4 as in the Inception paper's training recipe.
    if isinstance(output, tuple):
        loss: Tensor = criterion(output.logits, labels)
        return loss if output.aux_logits is None else loss + 0.4 * criterion(output.aux_logits, labels)
    return criterion(output, labels)


class Trainer:
    """One model + optimizer + synthetic batch; `run(n)` times n iterations."""

    def __init__(
        self,
        torch: ModuleType,
        model: nn.Module,
        optimizer: Optimizer,
        images: Tensor,
        labels: Tensor,
        precision: str,
        device: Device,
        step: Step,
    ):
        self.torch, self.model, self.optimizer = torch, model, optimizer
        self.images, self.labels, self.device = images, labels, device
        self.criterion = torch.nn.CrossEntropyLoss()
        self.amp = precision == "amp"
        self.scaler: GradScaler | None = torch.amp.GradScaler("cuda") if self.amp and device.type == "cuda" else None
        self.apply_step = step

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        if not self.amp:
            return contextlib.nullcontext()
        dtype = self.torch.float16 if self.device.type == "cuda" else self.torch.bfloat16
        return self.torch.autocast(device_type=self.device.type, dtype=dtype)

    def batch(self) -> None:
        self.optimizer.zero_grad()  # Horovod's wrapper takes no set_to_none
        with self.autocast():
            loss = loss_of(self.model(self.images), self.labels, self.criterion)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        self.apply_step(self.optimizer, self.scaler)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def run(
        self, warmup: int, iters: int, batches_per_iter: int, batch_size: int, progress: Progress | None = None
    ) -> list[float]:
        """img/s of each timed iteration on this rank."""
        return timed_iterations(self.batch, self.sync, warmup, iters, batches_per_iter, batch_size, progress)


def apply_numerics(torch: ModuleType, args: argparse.Namespace, device: Device) -> dict:
    """TF32, cuDNN autotuning and the memory layout as asked (bench.numerics); what was used."""
    gpu = device.type == "cuda"
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "on"
    return numerics.record(args, "torch", gpu, compiled="eager")


def torch_memory_format(torch: ModuleType, used: dict) -> memory_format:
    return torch.channels_last if used["memory_format"] == "channels_last" else torch.contiguous_format


def parameter_check(torch: ModuleType, model: nn.Module, engine: TorchEngine) -> tuple[float, str]:
    """Max |p - p_rank0| over all parameters, and a digest of this rank's parameters."""
    flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    reference = engine.broadcast(flat.clone())
    return float((flat - reference).abs().max()), digest


def torch_versions(torch: ModuleType, torchvision: ModuleType) -> dict:
    versions = {**common_versions(), "torch": torch.__version__, "torchvision": torchvision.__version__}
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        versions["gpu"] = torch.cuda.get_device_name()
    versions["horovod"] = package_version("horovod")
    return versions


def main(argv: list[str] | None = None) -> int:
    args = train_args.validate("torch", build_parser().parse_args(argv))
    import torch
    import torchvision

    from bench.torch_engines import ENGINES

    engine = ENGINES[args.engine](args)
    with errors_recorded(args.record_dir, engine.rank):
        return train(torch, torchvision, engine, args)


def train(torch: ModuleType, torchvision: ModuleType, engine: TorchEngine, args: argparse.Namespace) -> int:
    from bench.torch_device import rank_device

    device = rank_device(engine.local_rank)
    torch.manual_seed(args.seed + engine.rank)  # ranks start apart; the engine must make them equal

    used = apply_numerics(torch, args, device)
    layout = torch_memory_format(torch, used)
    # two calls: torch's stubs type no Module.to(device, memory_format=...)
    model = make_model(torchvision, args.model).to(device).to(memory_format=layout).train()
    compute_model = copy.deepcopy(model)  # the same step without any gradient exchange
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = engine.wrap(model, optimizer)

    size = args.image_size
    images = torch.randn(args.batch_size, 3, size, size, device=device).to(memory_format=layout)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)
    run = (args.warmup, args.iters, args.batches_per_iter, args.batch_size)

    trainer = Trainer(torch, model, optimizer, images, labels, args.precision, device, engine.step)
    engine.barrier()
    started = time.time()
    progress = Progress(args.record_dir, engine.rank, engine.size, "train", args.iters)
    samples = trainer.run(*run, progress)
    train_seconds = time.time() - started

    def local_step(opt: Optimizer, scaler: GradScaler | None) -> None:
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()

    params_max_abs_diff, params_sha256 = parameter_check(torch, trainer.model, engine)
    # The same step without exchange, all ranks at once as while training, with the engine
    # stopped: Horovod's background thread (which polls every cycle, and under MPI spins)
    # would otherwise compete for the cores and the communication share would read ~0.
    compute_optimizer = torch.optim.SGD(compute_model.parameters(), lr=0.01, momentum=0.9)
    compute = Trainer(torch, compute_model, compute_optimizer, images, labels, args.precision, device, local_step)
    engine.stop()
    compute_samples = compute.run(*run, progress.next_phase("compute"))
    return finish(
        args,
        engine,
        framework="torch",
        device=str(device),
        threads=torch.get_num_threads(),
        versions=torch_versions(torch, torchvision),
        numerics_used=used,
        parameters=sum(p.numel() for p in trainer.model.parameters()),
        samples=samples,
        compute_samples=compute_samples,
        train_seconds=train_seconds,
        params_max_abs_diff=params_max_abs_diff,
        params_sha256=params_sha256,
    )


if __name__ == "__main__":
    sys.exit(main())
