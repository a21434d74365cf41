"""TensorFlow's CUDA 12 libraries in the cuda image (FABRIC_BENCH_TF_CUDA: the folder of its
pinned nvidia-*-cu12 wheels, kept apart from torch's CUDA 13 ones that share their paths).

The loader reads LD_LIBRARY_PATH once, at process start: a TensorFlow program calls
`on_library_path()` before importing TensorFlow, which, where the folder's libraries are not
first on the path yet, replaces the process with itself (same pid, same argv) with them first.

    python -m bench.tf_cuda --check     the image self-test: TensorFlow's CUDA build and every
                                        library its GPU kernels open, loaded from the folder
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

ENV = "FABRIC_BENCH_TF_CUDA"
# What TensorFlow's stream executor opens by soname for a GPU (CUDA 12 builds): runtime, BLAS,
# FFT, RNG, solver, sparse, cuDNN 9, NCCL; the driver's libcuda.so.1 comes from the host
LIBRARIES = (
    "libcudart.so.12",
    "libcublasLt.so.12",
    "libcublas.so.12",
    "libcufft.so.11",
    "libcurand.so.10",
    "libcusolver.so.11",
    "libcusparse.so.12",
    "libcudnn.so.9",
    "libnccl.so.2",
)
DRIVER = "libcuda.so.1"


def library_dirs() -> list[str]:
    folder = os.environ.get(ENV, "")
    return sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib"))) if folder else []


def on_library_path() -> None:
    """Re-exec this process with the folder's libraries first on LD_LIBRARY_PATH (no-op
    outside the cuda image, or when they already are)."""
    dirs = library_dirs()
    current = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    if not dirs or current[: len(dirs)] == dirs:
        return
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join([*dirs, *(d for d in current if d not in dirs)])}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def check() -> str:
    """One line: TensorFlow's CUDA build and where each library came from; raises on a miss."""
    dirs = library_dirs()
    if not dirs:
        raise RuntimeError(f"{ENV} names no folder of nvidia-*-cu12 libraries")
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    if not build.get("is_cuda_build") or not str(build.get("cuda_version", "")).startswith("12."):
        raise RuntimeError(f"TensorFlow {tf.__version__} is not a CUDA 12 build: {dict(build)}")
    loaded = []
    for name in LIBRARIES:
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            if DRIVER not in str(exc):  # the driver is the host's: absent without a GPU
                raise RuntimeError(f"{name}: {exc}") from None
        found = [d for d in dirs if os.path.exists(os.path.join(d, name))]
        if not found:
            raise RuntimeError(f"{name} is not in {os.environ[ENV]}")
        loaded.append(name)
    return (
        f"TensorFlow {tf.__version__} built for CUDA {build['cuda_version']} cuDNN "
        f"{build.get('cudnn_version')}: {len(loaded)} libraries load from {os.environ[ENV]}"
    )


if __name__ == "__main__":
    on_library_path()
    if sys.argv[1:] != ["--check"]:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        sys.exit(2)
    try:
        print(check())
    except RuntimeError as exc:
        print(f"tf-cuda: {exc}")
        sys.exit(1)
