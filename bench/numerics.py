"""The settings that decide a training step's speed on a GPU besides the model and the batch:
TF32 math, the activations' memory layout, cuDNN's algorithm search, how the step is compiled,
and the dtype of the gradients on the wire. Both frameworks take the same choices by default
(TF32 on for convolutions and matmuls, as TensorFlow's default; channels_last on GPUs; cuDNN
autotuning on), each is switchable, and every train record carries what was used (`numerics`).

No framework import: torch_train and tf_engines apply the choices.
"""

from __future__ import annotations

import argparse

SWITCH = ("on", "off")
MEMORY_FORMATS = ("channels_last", "channels_first")  # NHWC | NCHW (torch's default contiguous)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tf32",
        choices=SWITCH,
        default="on",
        help="TF32 math for float32 convolutions and matmuls on GPUs (TensorFlow's default)",
    )
    p.add_argument(
        "--memory-format",
        choices=MEMORY_FORMATS,
        default=None,
        help="activation layout (default: channels_last on GPUs; on CPUs each framework's own)",
    )
    p.add_argument(
        "--cudnn-benchmark",
        choices=SWITCH,
        default="on",
        help="let cuDNN time its convolution algorithms for the first batches",
    )


def memory_format(args: argparse.Namespace, framework: str, gpu: bool) -> str:
    """The layout used: the asked one, else channels_last on GPUs (tensor cores want NHWC);
    on CPUs torch's contiguous NCHW and TensorFlow's NHWC (its CPU kernels take no other)."""
    if args.memory_format:
        return args.memory_format
    return "channels_last" if gpu or framework == "tf" else "channels_first"


def record(args: argparse.Namespace, framework: str, gpu: bool, compiled: str) -> dict:
    """The `numerics` field of a train record: what this rank's step ran with."""
    half = "float16" if gpu else "bfloat16"  # autocast / Keras mixed policy on each device
    mixed = args.precision in ("amp", "mixed")
    return {
        "precision": args.precision,
        "compute_dtype": half if mixed else "float32",
        "tf32_matmul": (args.tf32 == "on") if gpu else None,
        "tf32_conv": (args.tf32 == "on") if gpu else None,
        "memory_format": memory_format(args, framework, gpu),
        "cudnn_benchmark": (args.cudnn_benchmark == "on") if gpu else None,
        "compile": compiled,
        "gradient_wire_dtype": wire_dtype(args),
    }


def wire_dtype(args: argparse.Namespace) -> str:
    """The gradients' dtype on the wire: Horovod's fp16 compression halves them (only Horovod
    applies --fp16-allreduce); the engines otherwise exchange the float32 gradients of float32
    parameters (mixed precision included: autocast and Keras' mixed policy keep float32 variables)."""
    return "float16" if args.fp16_allreduce and args.engine == "horovod" else "float32"


WIRE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
MIB = 2**20
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed's first bucket (reducer default)


def wire(args: argparse.Namespace, engine_info: dict, parameters: int) -> dict:
    """The `wire` field of a train record: what one step puts on the wire and in what pieces.

    dtype and gradient_bytes (parameters x the wire dtype's bytes); DDP: the bucket cap in use and
    torch's 1 MiB first bucket; Horovod: the fusion threshold and cycle time as set (None where
    Horovod's own default applied, which this record does not read back); TF's native strategy:
    no buckets it reports."""
    dtype = wire_dtype(args)
    record = {"dtype": dtype, "gradient_bytes": WIRE_BYTES[dtype] * parameters}
    if args.engine == "ddp":
        cap = engine_info.get("bucket_cap_mb") or getattr(args, "bucket_cap_mb", None)
        record.update(bucket_bytes=int(float(cap) * MIB) if cap else None, first_bucket_bytes=DDP_FIRST_BUCKET_BYTES)
    elif args.engine == "horovod":
        threshold, cycle = engine_info.get("fusion_threshold_bytes"), engine_info.get("cycle_time_ms")
        record.update(
            fusion_threshold_bytes=int(threshold) if threshold not in (None, "") else None,
            cycle_time_ms=float(cycle) if cycle not in (None, "") else None,
            compression="fp16" if dtype == "float16" else "none",
        )
    return record
