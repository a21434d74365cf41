"""The GPU check's two first probes, each a process of its own (benchmarks/gpu_check.py
runs them under a hard deadline, so a hang costs its timeout and no more):

    python benchmarks/gpu_probes.py collective   # one-rank all_reduce: NCCL on a GPU, gloo on CPUs
    python benchmarks/gpu_probes.py compute      # ResNet-50 step img/s without any process group
    python benchmarks/gpu_probes.py load SECONDS # bf16 matrix products for SECONDS: the load
                                                 # beside which the GPU state captures are taken

Each prints one `GPU_PROBE {json}` line. The collective probe tells, in ~10 s, whether NCCL
starts at all here (NCCL_DEBUG=INFO lines go with it); the compute probe gives the compute-only
throughput whether or not NCCL works, so a failed NCCL still leaves a figure.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def report(**fields: object) -> None:
    print("GPU_PROBE " + json.dumps(fields), flush=True)


def collective() -> None:
    import torch
    import torch.distributed as dist

    from bench.torch_device import rank_device

    device = rank_device(0)
    backend = "nccl" if device.type == "cuda" else "gloo"
    with socket.socket() as s:  # a free port for the one-rank store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    tensor = torch.ones(1 << 20, device=device)
    dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    dist.destroy_process_group()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None
    report(
        probe="collective",
        backend=backend,
        device=str(device),
        ok=float(tensor[0]) == 1.0,
        seconds=round(seconds, 3),
        nccl=nccl,
    )


def compute(batch_size: int, image_size: int, warmup: int, iters: int) -> None:
    import argparse

    import torch
    import torchvision

    from bench.timing import timed_iterations
    from bench.torch_device import rank_device
    from bench.torch_train import Trainer, apply_numerics, make_model, torch_memory_format

    device = rank_device(0)
    args = argparse.Namespace(
        precision="fp32", tf32="on", cudnn_benchmark="on", memory_format=None, fp16_allreduce=False
    )
    used = apply_numerics(torch, args, device)
    layout = torch_memory_format(torch, used)
    model = make_model(torchvision, "resnet50").to(device).to(memory_format=layout).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch_size, 3, image_size, image_size, device=device).to(memory_format=layout)
    labels = torch.randint(0, 1000, (batch_size,), device=device)
    trainer = Trainer(torch, model, optimizer, images, labels, "fp32", device, lambda opt, scaler: opt.step())
    samples = timed_iterations(trainer.batch, trainer.sync, warmup, iters, 1, batch_size, None)
    report(
        probe="compute",
        model="resnet50",
        device=str(device),
        batch_size=batch_size,
        image_size=image_size,
        img_per_s=sum(samples) / len(samples),
        samples_img_per_s=samples,
        numerics=used,
    )


def load(seconds: float) -> None:
    """Keep the GPU busy: prints `GPU_PROBE {"probe": "load", ...}` once the first product is done."""
    import os

    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    report(probe="load", pid=os.getpid(), ready=True)
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    if argv[:1] == ["collective"]:
        collective()
    elif argv[:1] == ["compute"]:
        sizes = [int(a) for a in argv[1:5]] or [64, 224, 5, 10]
        compute(*sizes)
    elif argv[:1] == ["load"] and len(argv) == 2:
        load(float(argv[1]))
    else:
        print("usage: gpu_probes.py collective | compute [BATCH SIZE WARMUP ITERS] | load SECONDS", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
