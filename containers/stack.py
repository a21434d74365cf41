"""The pinned software stack: every version an image is built from, in one place.

Three flavours share the Python stack (the repo's requirements files plus the
Horovod 0.28.1 sdist with the project's patch, containers/horovod/); `cuda` and
`cpu` also share the communication stack, built from source at the versions
below with the same hpccm blocks and configure flags (containers/recipe.py
`common_blocks`):

- `cuda`: the GPU images sites build. Base from NVIDIA's CUDA registry image
  (or, `--base local`, a Debian root plus NVIDIA's CUDA wheels: the rehearsal
  here); the communication stack with CUDA (and gdrcopy, NCCL, aws-ofi-nccl).
  Issue 49 made it a CUDA-aware MPI: UCX 1.22.0 (CUDA, gdrcopy, threads) under
  the same Open MPI, where the cpu flavours keep bookworm's UCX 1.13.1; and the
  cuda image alone carries nccl-tests and a second Horovod with MPI GPU
  operations (HOROVOD_MPI_GPU_DIR, chosen by `--allreduce mpi`).
- `cpu`:  CI and laptops. Base: a local Debian bookworm root filesystem made
  with debootstrap from the host's configured mirror; the same communication
  stack with CUDA off, so CI builds and runs what the site images carry; the
  Horovod wheel is the one built on the host by containers/horovod/build-wheel.sh
  (against the host's Debian Open MPI 4.1.4: the same version and ABI as the
  image's), so host and image compare like for like. About 35 minutes cold on
  2 cores: the podman rehearsal records it (containers/rehearsals/).
- `cpu-debian`: CI's cold path and quick laptop runs. The same base and Python
  stack, with Debian bookworm's packaged communication stack (the same Open MPI
  and UCX releases as `cpu`'s source build; libfabric 1.17.0 and Debian's
  PMIx): minutes to build, where `cpu` does not fit CI's budget beside the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAVOURS = ("cuda", "cpu", "cpu-debian")
CPU_FLAVOURS = ("cpu", "cpu-debian")  # a Debian bookworm base, local wheels, no CUDA

# Where everything of ours lives inside an image.
PREFIX = "/opt/fabric-bench"
VENV = f"{PREFIX}/venv"
BENCH_PARENT = f"{PREFIX}/lib"  # holds bench/; put on sys.path by a .pth file
WHEELHOUSE = "/wheelhouse"  # cpu builds: local wheels bound here at build time


@dataclass(frozen=True)
class SourceBuild:
    """A component built from source (cuda flavour)."""

    name: str
    version: str
    url: str = ""  # empty: the hpccm building block knows where


# cuda flavour ------------------------------------------------------------
CUDA_VERSION = "13.0.2"
CUDA_DEVEL_IMAGE = f"nvidia/cuda:{CUDA_VERSION}-devel-ubuntu24.04"
CUDA_RUNTIME_IMAGE = f"nvidia/cuda:{CUDA_VERSION}-runtime-ubuntu24.04"
CUDA_DISTRO = "ubuntu24"  # hpccm's name for the base distribution
CUDA_PYTHON = "3.12"  # Ubuntu 24.04's python3
CUDA_ARCHS = ("80", "90", "100")  # A100, H100/H200, B200/GB200 (CUDA 13 has no older ones)
# TensorFlow's Linux wheels (2.21 included) are built against CUDA 12 and take their GPU
# libraries from nvidia-*-cu12 wheels (its `and-cuda` extra), which run beside this CUDA 13 base on
# any driver that runs CUDA 13: the cuda image carries them, pinned, in their own folder
# (TF_CUDA_DIR; bench.tf_cuda puts it on a TensorFlow process's library path). What still cannot
# work is refused (launch.site.preflight): Horovod's GPU operations are built with CUDA 13 and
# NCCL for torch, so TensorFlow + Horovod on GPUs would mix two CUDA runtimes in one process.
TF_CUDA_MAJOR = 12
TF_CUDA_REQUIREMENTS = REPO / "requirements-tf-cuda.txt"
TF_CUDA_DIR = f"{PREFIX}/tf-cuda{TF_CUDA_MAJOR}"

# MPI on GPU buffers (issue 49): what a cuda image says about it, as labels (org.fabric-bench.<name>)
# that preflight reads (launch.site.preflight.mpi_on_gpus_refusal); an image without them is refused
# MPI on GPU buffers in one line naming the missing label. The recipe work fills them in:
# - MPI_CUDA_LABEL: the image's MPI moves GPU buffers (CUDA-aware), its value what carries them
#   ("ucx": Open MPI's UCX PML over UCX built with CUDA and gdrcopy). A fabric image whose MPI path
#   cannot (Omni-Path's psm2 MTL over a libpsm2 built without PSM_CUDA) carries no such label.
# - HOROVOD_MPI_GPU_LABEL: the image holds a second Horovod, built with HOROVOD_GPU_OPERATIONS=MPI
#   (the first is built with NCCL GPU operations; GPU operations are fixed in a build), installed
#   as a package folder at HOROVOD_MPI_GPU_DIR (`pip install --target`); its value is that folder.
#   A run with --allreduce mpi on GPUs puts it first on the ranks' PYTHONPATH
#   (launch.ranks.launchers.rank_env), so `import horovod` finds it before the venv's.
MPI_CUDA_LABEL = "mpi-cuda"
HOROVOD_MPI_GPU_LABEL = "horovod-mpi-gpu"
HOROVOD_MPI_GPU_DIR = f"{PREFIX}/horovod-mpi-gpu"


def tf_cuda_version() -> str:
    """The CUDA release of TensorFlow's libraries in the cuda image ("12.9"): its label says
    which images carry them (older cuda images do not: their TensorFlow sees no GPU)."""
    runtime = pinned(TF_CUDA_REQUIREMENTS)[f"nvidia-cuda-runtime-cu{TF_CUDA_MAJOR}"]
    return ".".join(runtime.split(".")[:2])


# `--base local`: the toolkit as NVIDIA's PyPI wheels lay it out (containers/cudabase.py)
CUDA_WHEELS = (
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-cupti==13.0.85",
    "nvidia-nvtx==13.0.85",
    "nvidia-cuda-culibos==13.0.85",
    "nvidia-nvml-dev==13.0.87",
)


# Versions and canonical URLs: containers/sources.py (re-pins there say why)
def _built(name: str) -> SourceBuild:
    from containers.sources import source

    src = source(name)
    return SourceBuild(name, src.version, src.site_url)


RDMA_CORE = _built("rdma-core")
GDRCOPY = _built("gdrcopy")
UCX = _built("ucx")  # 1.22.0 with CUDA and gdrcopy: the CUDA-aware Open MPI's (issue 49)
LIBFABRIC = _built("libfabric")
PMIX = _built("pmix")
OPENMPI = _built("openmpi")
NCCL = _built("nccl")  # NVIDIA's binary NCCL: torch's nvidia-nccl-cu13 wheel
AWS_OFI_NCCL = _built("aws-ofi-nccl")
LIBPSM2 = _built("libpsm2")
NCCL_TESTS = _built("nccl-tests")  # built with MPI=1 against the stack's Open MPI and NCCL
SOURCE_BUILDS = (RDMA_CORE, GDRCOPY, UCX, LIBFABRIC, PMIX, OPENMPI, NCCL, AWS_OFI_NCCL, LIBPSM2, NCCL_TESTS)
# The libfabric the Slingshot layer builds aws-ofi-nccl against (containers/sources.py says why);
# the host's libfabric replaces it at run time, so it is not part of any image
LIBFABRIC_SHS = _built("libfabric-shs")
# its symbol-version ceiling: what a plugin linked against it may need of the host's libfabric
LIBFABRIC_SHS_ABI = "FABRIC_1.7"

# Where the cuda image keeps what issue 49 added (launch code names these paths, not literals)
NCCL_TESTS_PREFIX = "/usr/local/nccl-tests"  # bin/all_reduce_perf, ... (MPI=1 builds)
# Horovod a second time, with MPI GPU operations (HOROVOD_GPU_OPERATIONS=MPI: the CUDA-aware
# Open MPI moves GPU tensors): a `pip install --target` folder holding the `horovod` package (and
# bin/horovodrun). `--allreduce mpi` puts it first on PYTHONPATH; the venv's own Horovod keeps
# NCCL GPU operations (`--allreduce nccl`, the default). The image exports the folder as
# HOROVOD_MPI_GPU_ENV (the folder, HOROVOD_MPI_GPU_DIR, is named above with its label).
HOROVOD_MPI_GPU_ENV = "FABRIC_BENCH_HOROVOD_MPI_GPU"
# --allreduce VALUE -> the folder put first on PYTHONPATH ("" = the venv's own Horovod)
HOROVOD_BUILDS = {"nccl": "", "mpi": HOROVOD_MPI_GPU_DIR}

# cpu flavour -------------------------------------------------------------
DEBIAN_SUITE = "bookworm"
DEBIAN_PYTHON = "3.11"  # bookworm's python3, as the host venv
# The communication stack of the cpu flavour: the cuda flavour's, less what needs CUDA
# less what needs CUDA, and with bookworm's UCX 1.13.1 (the release cpu-debian carries; its
# component is "ucx-cpu", its image's name for it "ucx")
UCX_CPU = replace(_built("ucx-cpu"), name="ucx")
CPU_SOURCE_BUILDS = tuple(
    UCX_CPU if b.name == "ucx" else b
    for b in SOURCE_BUILDS
    if b.name not in ("gdrcopy", "nccl", "aws-ofi-nccl", "nccl-tests")
)
# cpu-debian: what bookworm ships; each image's %test checks the MPI/UCX/libfabric ones
DEBIAN_VERSIONS = {"openmpi": "4.1.4", "ucx": "1.13.1", "libfabric": "1.17.0"}
# v2: the base carries the rehearsal's wget (containers/sources.py); bump when the base changes
BASE_VERSION = "v2"
BASE_IMAGE_TAG = f"localhost/fabric-bench-base:{DEBIAN_SUITE}-{BASE_VERSION}"  # podman's name for the base
# podman's names for the local CUDA bases (`--base local`, containers/cudabase.py)
LOCAL_CUDA_DEVEL_TAG = f"localhost/fabric-bench-cuda:{CUDA_VERSION}-devel-{DEBIAN_SUITE}"
LOCAL_CUDA_RUNTIME_TAG = f"localhost/fabric-bench-cuda:{CUDA_VERSION}-runtime-{DEBIAN_SUITE}"

# Python stack (both flavours) -------------------------------------------
HOROVOD_VERSION = "0.28.1"
REQUIREMENTS = REPO / "requirements.txt"
REQUIREMENTS_NODEPS = REPO / "requirements-nodeps.txt"
HOROVOD_DIR = REPO / "containers" / "horovod"


def pinned(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, by lower-case name."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def python_versions() -> dict[str, str]:
    """The framework versions every image carries (and labels)."""
    pins = pinned(REQUIREMENTS) | pinned(REQUIREMENTS_NODEPS)
    return {
        "torch": pins["torch"],
        "torchvision": pins["torchvision"],
        "tensorflow": pins["tensorflow-cpu"],
        "horovod": HOROVOD_VERSION,
        "numpy": pins["numpy"],
        "mpi4py": pins["mpi4py"],
    }


def versions(flavour: str, base: str = "site") -> dict[str, str]:
    """Every pinned version of a flavour, as the image's labels carry them. The base
    (site: NVIDIA's image; local: Debian + CUDA wheels) brings its own python."""
    if flavour == "cuda":
        stack = {"base": CUDA_DEVEL_IMAGE, "cuda": CUDA_VERSION, "python": CUDA_PYTHON}
        if base == "local":
            stack |= {"base": f"local/debian:{DEBIAN_SUITE}+cuda-wheels-{CUDA_VERSION}", "python": DEBIAN_PYTHON}
        stack |= {build.name: build.version for build in SOURCE_BUILDS}
        stack["tensorflow-cuda"] = tf_cuda_version()
    else:
        stack = {"base": f"local/debian:{DEBIAN_SUITE}-minbase", "python": DEBIAN_PYTHON}
        stack |= (
            DEBIAN_VERSIONS if flavour == "cpu-debian" else {build.name: build.version for build in CPU_SOURCE_BUILDS}
        )
    return stack | python_versions()
