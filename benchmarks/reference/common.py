"""What every reference loop shares: its arguments and how it reports.

A reference loop is the frameworks' documented synthetic benchmark reduced to
its core: forward, backward and optimizer step through the engine on one
synthetic batch, timed over --iters iterations of --batches-per-iter batches
after --warmup batches. No records, heartbeats, barriers or environment of our
own. Rank 0 prints one line: REFERENCE_PREFIX + JSON with the mean img/s per
rank and in total (per rank x ranks, as Horovod's benchmarks report it).
"""

from __future__ import annotations

import argparse
import json
import time
from types import ModuleType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # torch is passed in by the torch loops (TF's loop imports no torch)
    from torch import nn
    from torch.optim import Optimizer

REFERENCE_PREFIX = "[reference]"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--batches-per-iter", type=int, default=2)
    return p


def torch_step(
    torch: ModuleType, model: nn.Module, optimizer: Optimizer, args: argparse.Namespace
) -> Callable[[], None]:
    """The PyTorch loops' step on one synthetic batch (torch passed in: TF's loop imports no torch)."""
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 1000, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()

    return step


def timed(step: Callable[[], object], args: argparse.Namespace) -> list[float]:
    """img/s of each timed iteration on this rank."""
    for _ in range(args.warmup):
        step()
    samples = []
    for _ in range(args.iters):
        start = time.perf_counter()
        for _ in range(args.batches_per_iter):
            step()
        samples.append(args.batch_size * args.batches_per_iter / (time.perf_counter() - start))
    return samples


def report(rank: int, size: int, samples: list[float], **facts: object) -> None:
    if rank == 0:
        per_rank = sum(samples) / len(samples)
        print(
            REFERENCE_PREFIX,
            json.dumps(
                {
                    "per_rank_img_per_s": per_rank,
                    "total_img_per_s": per_rank * size,
                    "ranks": size,
                    "samples_img_per_s": samples,
                    **facts,
                }
            ),
            flush=True,
        )
