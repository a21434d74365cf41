"""Command-line arguments shared by the training benchmarks (torch and tf).

Bad values end the program with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from bench import catalog, numerics


def parser(framework: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m bench.{framework}_train",
        description=f"Synthetic-data data-parallel training benchmark ({framework}).",
    )
    p.add_argument("--engine", required=True, help=" | ".join(catalog.ENGINES[framework]))
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per batch")
    p.add_argument("--image-size", type=int, default=None, help="square input size (default: the model's)")
    p.add_argument("--warmup", type=int, default=5, help="batches run before timing")
    p.add_argument("--iters", type=int, default=10, help="timed iterations")
    p.add_argument("--batches-per-iter", type=int, default=5)
    p.add_argument("--precision", default="fp32", help=" | ".join(catalog.PRECISIONS[framework]))
    p.add_argument("--fp16-allreduce", action="store_true", help="Horovod fp16 gradient compression")
    p.add_argument("--fusion-threshold-mb", type=float, default=None, help="Horovod tensor fusion buffer")
    p.add_argument("--cycle-time-ms", type=float, default=None, help="Horovod cycle time")
    numerics.add_arguments(p)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--param-tolerance",
        type=float,
        default=1e-6,
        help="largest parameter difference between ranks still counted as identical",
    )
    p.add_argument("--record-dir", required=True, help="where each rank writes rank-<N>.jsonl")
    return p


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def validate(framework: str, args: argparse.Namespace) -> argparse.Namespace:
    models = catalog.MODELS[framework]
    if args.engine not in catalog.ENGINES[framework]:
        fail(f"unknown engine {args.engine!r} for {framework}; choose from {', '.join(catalog.ENGINES[framework])}")
    if args.model not in models:
        fail(f"unknown model {args.model!r} for {framework}; choose from {', '.join(models)}")
    if args.precision not in catalog.PRECISIONS[framework]:
        fail(f"unknown precision {args.precision!r}; choose from {', '.join(catalog.PRECISIONS[framework])}")
    for name in ("batch_size", "iters", "batches_per_iter"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        fail(f"--warmup must be >= 0, got {args.warmup}")
    if args.image_size is None:
        args.image_size = models[args.model]
    minimum = catalog.MIN_IMAGE_SIZE.get(args.model, 32)
    if args.image_size < minimum:
        fail(f"--image-size {args.image_size} is too small for {args.model} (minimum {minimum})")
    return args


def config_of(args: argparse.Namespace) -> dict:
    """The run's configuration as it goes into every record."""
    return {k: v for k, v in vars(args).items() if k != "record_dir"}
