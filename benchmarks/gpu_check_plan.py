"""The GPU check's plan (benchmarks/gpu_check.py): the runs it makes, in order of importance,
why one cannot start here, the sizes of each mode and every run's command line."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from bench.gpu_request import GPUS_REQUESTED_ENV  # standard library only
from bench.placement import SHARED_GPU_ENV  # standard library only

# Each step's time limit in seconds, in order; the check's hard deadline is their sum, counted from
# when benchmarks/gpu_check.sh starts. On a GPU they add up to 300 s (GPU_CHECK_LIMIT_S): the whole
# check fits 5 minutes, so a second try fits a 15-minute slot (issue 49). A step that ends early
# leaves its time to the next; the runs take what is left, in order of importance.
STEP_LIMITS_S: dict[str, dict[str, float]] = {
    "gpu": {"python": 10, "environment": 30, "captures": 15, "gpu_states": 35, "probes": 60, "runs": 150},
    "cpu": {"python": 10, "environment": 60, "captures": 5, "gpu_states": 5, "probes": 180, "runs": 1200},
}
GPU_CHECK_LIMIT_S = 300
PROBE_LIMITS_S = {"gpu": {"collective": 20, "compute": 40}, "cpu": {"collective": 60, "compute": 120}}
RUN_LIMIT_S = {"gpu": 90, "cpu": 300}  # one run at most
RUN_START_MARGIN_S = 20  # no run starts this close to the deadline: it could not finish

TORCH_MODELS = ("resnet50", "vgg16", "inception_v3")
TORCH_PRECISIONS = ("fp32", "amp")
TF_MODEL, TF_PRECISIONS = "ResNet50", ("fp32", "mixed")
# GPU: the models' own image sizes, a real batch; CPU: tiny, to prove the path
SIZES: dict[str, dict[str, int | None]] = {
    "gpu": {"batch_size": 256, "warmup": 5, "iters": 5, "batches_per_iter": 5, "image_size": None},
    "cpu": {"batch_size": 2, "warmup": 0, "iters": 2, "batches_per_iter": 1, "image_size": 32},
}
# Inception-v3 trains with its auxiliary head (bench.torch_train), whose 5x5 conv after a
# 5x5/3 pooling needs 17x17 at Mixed_6e: 299 px; anything smaller fails (75 px, the
# catalog's minimum, fails with "Output size is too small").
CPU_IMAGE_SIZE = {"inception_v3": 299}
# With --cpu (unless --full), to stay near 2 minutes on 2 cores: AMP on torch ResNet-50 only,
# bf16 autocast being slow on CPUs (VGG-16 AMP took 206 s for four batches of 2 here, fp32
# 54 s), and TF in fp32 only (each TF run costs ~40 s of start-up and tracing).
# The batch comparison (issue 42, item 9): ResNet-50 on one GPU at batch 64 beside the default 256,
# the batch NVIDIA's published ResNet-50 figures use (64 leaves an H100-class GPU launch-bound in eager mode)
SMALL_BATCH = 64
BATCH_RUN = f"torch-ddp-resnet50-fp32-b{SMALL_BATCH}"
# The harness's allreduce (bench.allreduce: torch/NCCL on device buffers, two ranks sharing the one GPU
# as separate NCCL hosts) beside nccl-tests' all_reduce_perf where a site has built it: the same
# conventions (doubling sizes, in place and out of place, algbw and busbw), so the figures sit side by side
ALLREDUCE_RUN = "allreduce-torch-2ranks"
NCCL_TESTS_RUN = "nccl-tests-all_reduce_perf"
ALLREDUCE_MAX_BYTES = {"gpu": 2**30, "cpu": 2**16}  # 1 GiB: the check's budget; the bundle's own runs go to 8 GiB
NCCL_TESTS_BINARY = "all_reduce_perf"
CPU_SKIPPED = {
    BATCH_RUN: "the batch comparison is a GPU measure (the CPU mode trains batches of 2)",
    NCCL_TESTS_RUN: "nccl-tests needs a GPU",
    "torch-ddp-vgg16-amp": "AMP runs on ResNet-50 only (bf16 autocast is slow on CPUs)",
    "torch-ddp-inception_v3-amp": "AMP runs on ResNet-50 only (bf16 autocast is slow on CPUs)",
    "tf-native-ResNet50-mixed": "TensorFlow runs in fp32 only (~40 s of start-up per TF run)",
}


@dataclasses.dataclass
class Run:
    label: str
    framework: str
    engine: str
    model: str
    precision: str
    needs: str  # what must be present: torch | tf | horovod | mpirun | nccl-tests
    ranks: int = 1  # 2: two ranks share the one GPU (bench.torch_device.SHARED_GPU_ENV)
    batch_size: int | None = None  # None: the mode's (SIZES)
    benchmark: str = "train"  # train | allreduce | nccl-tests


SHARED_GPU_RUN = "torch-ddp-resnet50-fp32-2ranks"


def planned_runs() -> list[Run]:
    """In order of importance: the DDP/NCCL run first, the budget may cut the tail."""
    runs = [Run(f"torch-ddp-{m}-{p}", "torch", "ddp", m, p, "torch") for m in TORCH_MODELS for p in TORCH_PRECISIONS]
    runs.insert(1, Run(SHARED_GPU_RUN, "torch", "ddp", "resnet50", "fp32", "torch", ranks=2))
    runs.insert(2, Run(BATCH_RUN, "torch", "ddp", "resnet50", "fp32", "torch", batch_size=SMALL_BATCH))
    runs.insert(3, Run(ALLREDUCE_RUN, "torch", "torch", "-", "fp32", "torch", ranks=2, benchmark="allreduce"))
    runs.insert(4, Run(NCCL_TESTS_RUN, "nccl-tests", "nccl", "-", "fp32", "nccl-tests", benchmark="nccl-tests"))
    runs.insert(5, Run("torch-horovod-resnet50-fp32", "torch", "horovod", "resnet50", "fp32", "horovod"))
    runs += [Run(f"tf-native-{TF_MODEL}-{p}", "tf", "native", TF_MODEL, p, "tf") for p in TF_PRECISIONS]
    return runs


def unavailable(run: Run, info: dict) -> str | None:
    """Why a run cannot start here, or None."""
    if not info.get("torch") and run.framework == "torch":
        return f"torch is not importable by {info.get('python')}: {info.get('torch_error', 'absent')}"
    if run.benchmark == "train" and run.framework == "torch" and not info.get("torchvision"):
        return f"torchvision is not importable by {info.get('python')} (the models come from it)"
    if run.needs == "horovod":
        if not info.get("horovod"):
            return (
                f"Horovod is not installed for {info.get('python')}; it cannot be fetched here, and building "
                "it from its sdist takes ~5-7 min (ENVIRONMENT.md), more than this check's budget"
            )
        if not info.get("horovod_torch"):
            return f"Horovod {info['horovod']} was built without its PyTorch extension"
        if not info.get("launch_cli"):
            return "the launch CLI is not importable, and Horovod needs its launcher (mpirun/horovodrun)"
        if not (info["tools"].get("mpirun") or info["tools"].get("horovodrun")):
            return "neither mpirun nor horovodrun is present to start a Horovod rank"
    if run.needs == "nccl-tests" and not info["tools"].get(NCCL_TESTS_BINARY):
        return (
            f"nccl-tests' {NCCL_TESTS_BINARY} is not on PATH (a site builds nccl-tests itself; put its build/ "
            "on PATH to set its figures beside the harness's)"
        )
    if run.framework == "tf":
        if not info.get("tensorflow_importable"):
            return f"TensorFlow is not installed for {info.get('python')} (too large to carry)"
        if not info.get("launch_cli"):
            return "the launch CLI is not importable (TensorFlow runs start through it)"
        if not info["tools"].get("mpirun"):
            return "mpirun is absent: tf.distribute ranks bootstrap over MPI"
    return None


def modules(info: dict) -> dict[str, bool]:
    """Which of the Python modules the check looks for (gpu_check_host.MODULES) import here."""
    return info.get("modules") or {}


def allreduce_by_torchrun(info: dict) -> bool:
    """Whether the harness's allreduce starts under torchrun (torch backend: no mpirun, no mpi4py,
    summarised from its rank records), as it does unless the launch CLI, mpirun and mpi4py are all
    here (then `fabric-bench run`, whose local launcher starts it over MPI and writes a result.json)."""
    return not (info.get("launch_cli") and info.get("tools", {}).get("mpirun") and modules(info).get("mpi4py"))


def direct_env(run: Run, mode: str) -> dict[str, str]:
    """What a rank started without the launch CLI is told, as the launch CLI would tell it: the GPUs
    asked for (a rank that sees none ends in one line), and, where two ranks share the one GPU,
    that each is a host of its own to NCCL (bench.torch_device: else "Duplicate GPU detected")."""
    env = {GPUS_REQUESTED_ENV: "1" if mode == "gpu" else "0"}
    if mode == "gpu" and run.ranks > 1:
        env[SHARED_GPU_ENV] = "1"
    return env


def torchrun_argv(run: Run, run_dir: Path) -> list[str]:
    """torchrun of this Python (`-m torch.distributed.run`: a torchrun on PATH may be another
    Python's), its per-run folder under the run's."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(run.ranks),
        "--log-dir",
        str(run_dir / "torchrun"),
        "--module",
    ]


def allreduce_direct_argv(run: Run, mode: str, run_dir: Path) -> list[str]:
    """The harness's allreduce under torchrun, torch backend (NCCL on device buffers, gloo with --cpu)."""
    warmup, iters = ("5", "20") if mode == "gpu" else ("1", "3")
    return torchrun_argv(run, run_dir) + [
        "bench.allreduce",
        "--backend",
        run.engine,
        "--warmup",
        warmup,
        "--iters",
        iters,
        "--max-bytes",
        str(ALLREDUCE_MAX_BYTES[mode]),
        "--record-dir",
        str(run_dir / "ranks"),
    ]


def sizes_for(run: Run, mode: str) -> dict:
    sizes = dict(SIZES[mode])
    if mode == "cpu":
        sizes["image_size"] = CPU_IMAGE_SIZE.get(run.model, sizes["image_size"])
    elif run.batch_size:
        sizes["batch_size"] = run.batch_size
    return sizes


FABRIC_BENCH = [
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'fabric-bench'; from launch.cli.app import main; main()",
]


def allreduce_argv(run: Run, mode: str, run_dir: Path, timeout_s: float) -> list[str]:
    """The harness's allreduce: torch on device buffers (NCCL) on a GPU, gloo with --cpu."""
    warmup, iters = ("5", "20") if mode == "gpu" else ("1", "3")  # --cpu: prove the path, cheaply
    argv = [
        *FABRIC_BENCH,
        "run",
        "--benchmark",
        "allreduce",
        "--backend",
        run.engine,
        "--ranks",
        str(run.ranks),
        "--launcher",
        "local",
        "--runtime",
        "host",
        "--warmup",
        warmup,
        "--iters",
        iters,
        "--max-bytes",
        str(ALLREDUCE_MAX_BYTES[mode]),
        "--results",
        str(run_dir),
        "--timeout",
        str(timeout_s),
    ]
    if mode == "gpu":
        argv += ["--gpus-per-node", "1", "--env", f"{SHARED_GPU_ENV}=1"]
    return argv


def nccl_tests_argv(info: dict, mode: str) -> list[str]:
    """nccl-tests' own conventions: sizes doubling (-f 2) from 8 B, 5 warm-up and 20 timed operations
    back to back per size, in place and out of place, algbw and busbw; one GPU (-g 1)."""
    return [
        info["tools"][NCCL_TESTS_BINARY],
        "-b",
        "8",
        "-e",
        str(ALLREDUCE_MAX_BYTES[mode]),
        "-f",
        "2",
        "-g",
        "1",
        "-w",
        "5",
        "-n",
        "20",
    ]


def fabric_bench_argv(run: Run, mode: str, info: dict, run_dir: Path, timeout_s: float) -> list[str]:
    if run.benchmark == "allreduce":
        return allreduce_argv(run, mode, run_dir, timeout_s)
    sizes = sizes_for(run, mode)
    argv = [
        *FABRIC_BENCH,
        "run",
        "--benchmark",
        "train",
        "--framework",
        run.framework,
        "--engine",
        run.engine,
        "--model",
        run.model,
        "--precision",
        run.precision,
        "--ranks",
        str(run.ranks),
        "--launcher",
        "local",
        "--runtime",
        "host",
        "--batch-size",
        str(sizes["batch_size"]),
        "--warmup",
        str(sizes["warmup"]),
        "--iters",
        str(sizes["iters"]),
        "--batches-per-iter",
        str(sizes["batches_per_iter"]),
        "--results",
        str(run_dir),
        "--timeout",
        str(timeout_s),
    ]
    if sizes["image_size"]:
        argv += ["--image-size", str(sizes["image_size"])]
    if run.engine == "horovod" and not info["tools"].get("mpirun"):
        argv += ["--controller", "gloo"]
    if mode == "gpu":
        argv += ["--gpus-per-node", "1"]
        if run.engine == "ddp":
            argv += ["--allreduce", "nccl"]
        if run.ranks > 1:
            argv += ["--env", f"{SHARED_GPU_ENV}=1"]
    else:
        argv += ["--env", "CUDA_VISIBLE_DEVICES="]  # a CPU run even where a GPU is present
    return argv


def direct_argv(run: Run, mode: str, run_dir: Path) -> list[str]:
    """Without the launch CLI: the bench program itself under torchrun (torch only)."""
    sizes = sizes_for(run, mode)
    argv = torchrun_argv(run, run_dir) + [
        "bench.torch_train",
        "--engine",
        run.engine,
        "--model",
        run.model,
        "--precision",
        run.precision,
        "--batch-size",
        str(sizes["batch_size"]),
        "--warmup",
        str(sizes["warmup"]),
        "--iters",
        str(sizes["iters"]),
        "--batches-per-iter",
        str(sizes["batches_per_iter"]),
        "--record-dir",
        str(run_dir / "ranks"),
    ]
    if sizes["image_size"]:
        argv += ["--image-size", str(sizes["image_size"])]
    if mode == "gpu":
        argv += ["--backend", "nccl"]
    return argv
