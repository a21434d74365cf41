"""What decides GPU speed besides the model is chosen alike for torch and TF, and recorded."""

import pytest

from bench import numerics, train_args
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec


def parsed(framework: str, *extra: str):
    return train_args.validate(
        framework,
        train_args.parser(framework).parse_args(
            [
                "--engine",
                "horovod",
                "--model",
                "resnet50" if framework == "torch" else "ResNet50",
                "--record-dir",
                "/tmp/x",
                *extra,
            ]
        ),
    )


def test_torch_and_tf_default_to_the_same_gpu_numerics():
    torch_gpu = numerics.record(parsed("torch"), "torch", gpu=True, compiled="eager")
    tf_gpu = numerics.record(parsed("tf"), "tf", gpu=True, compiled="tf.function")
    shared = ("tf32_matmul", "tf32_conv", "memory_format", "cudnn_benchmark", "compute_dtype", "gradient_wire_dtype")
    assert (
        {k: torch_gpu[k] for k in shared}
        == {k: tf_gpu[k] for k in shared}
        == {
            "tf32_matmul": True,
            "tf32_conv": True,
            "memory_format": "channels_last",
            "cudnn_benchmark": True,
            "compute_dtype": "float32",
            "gradient_wire_dtype": "float32",
        }
    )


def test_cpu_records_no_gpu_switches_and_each_framework_s_own_layout():
    cpu = numerics.record(parsed("torch", "--precision", "amp"), "torch", gpu=False, compiled="eager")
    assert cpu["tf32_matmul"] is None and cpu["cudnn_benchmark"] is None
    assert cpu["memory_format"] == "channels_first" and cpu["compute_dtype"] == "bfloat16"
    assert numerics.record(parsed("tf"), "tf", gpu=False, compiled="x")["memory_format"] == "channels_last"


def test_switches_reach_the_record():
    args = parsed(
        "torch",
        "--tf32",
        "off",
        "--memory-format",
        "channels_first",
        "--cudnn-benchmark",
        "off",
        "--fp16-allreduce",
        "--precision",
        "amp",
    )
    used = numerics.record(args, "torch", gpu=True, compiled="eager")
    assert (used["tf32_matmul"], used["tf32_conv"], used["memory_format"], used["cudnn_benchmark"]) == (
        False,
        False,
        "channels_first",
        False,
    )
    assert used["compute_dtype"] == "float16" and used["gradient_wire_dtype"] == "float16"
    assert numerics.WIRE_BYTES[used["gradient_wire_dtype"]] == 2  # gradient_bytes follows the wire


def test_runspec_passes_the_numerics_to_the_bench_program_and_refuses_unknown_values():
    args = RunSpec(tf32="off", memory_format="channels_first", cudnn_benchmark="off").validated().bench_args()
    assert args[args.index("--tf32") + 1] == "off" and args[args.index("--cudnn-benchmark") + 1] == "off"
    assert args[args.index("--memory-format") + 1] == "channels_first"
    assert "--memory-format" not in RunSpec().validated().bench_args()  # the device's choice
    parsed("torch", *RunSpec().validated().bench_args()[4:])  # every flag the bench program accepts
    with pytest.raises(UsageError, match="--memory-format must be one of channels_last, channels_first"):
        RunSpec(memory_format="nhwc").validated()
    with pytest.raises(UsageError, match="--tf32 must be one of on, off"):
        RunSpec(tf32="yes").validated()


def test_the_wire_field_records_dtype_bytes_and_the_pieces_in_use():
    hvd = parsed("torch", "--fp16-allreduce", "--fusion-threshold-mb", "32")
    wire = numerics.wire(hvd, {"fusion_threshold_bytes": str(32 * 2**20), "cycle_time_ms": None}, 1000)
    assert wire == {
        "dtype": "float16",
        "gradient_bytes": 2000,
        "fusion_threshold_bytes": 32 * 2**20,
        "cycle_time_ms": None,
        "compression": "fp16",
    }
    ddp = train_args.validate(
        "torch",
        train_args.parser("torch").parse_args(
            ["--engine", "ddp", "--model", "resnet50", "--record-dir", "/tmp/x", "--fp16-allreduce"]
        ),
    )
    ddp.bucket_cap_mb = 10.0
    wire = numerics.wire(ddp, {"backend": "gloo", "bucket_cap_mb": 10.0}, 1000)
    # DDP ignores the Horovod-only compression flag: its gradients stay float32 on the wire
    assert wire == {"dtype": "float32", "gradient_bytes": 4000, "bucket_bytes": 10 * 2**20, "first_bucket_bytes": 2**20}
