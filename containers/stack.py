"""The pinned software stack: every version an image is built from, in one place.

Two flavours share the Python stack (the repo's requirements files plus the
Horovod 0.28.1 sdist with the project's patch, containers/horovod/):

- `cuda`: the GPU images sites build. Base from NVIDIA's CUDA registry image;
  the communication stack built from source at the versions below.
- `cpu`:  CI and laptops. Base: a local Debian bookworm root filesystem made
  with debootstrap from the host's configured mirror; fabric libraries are
  Debian's packages (versions below are what bookworm ships, checked by the
  image's %test); the Horovod wheel is the one built on the host by
  containers/horovod/build-wheel.sh, so host and image compare like for like.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAVOURS = ("cuda", "cpu")

# Where everything of ours lives inside an image.
PREFIX = "/opt/fabric-bench"
VENV = f"{PREFIX}/venv"
BENCH_PARENT = f"{PREFIX}/lib"        # holds bench/; put on sys.path by a .pth file
WHEELHOUSE = "/wheelhouse"            # cpu builds: local wheels bound here at build time


@dataclass(frozen=True)
class SourceBuild:
    """A component built from source (cuda flavour)."""
    name: str
    version: str
    url: str = ""                     # empty: the hpccm building block knows where


# cuda flavour ------------------------------------------------------------
CUDA_VERSION = "13.0.2"
CUDA_DEVEL_IMAGE = f"nvidia/cuda:{CUDA_VERSION}-devel-ubuntu24.04"
CUDA_RUNTIME_IMAGE = f"nvidia/cuda:{CUDA_VERSION}-runtime-ubuntu24.04"
CUDA_DISTRO = "ubuntu24"              # hpccm's name for the base distribution
CUDA_PYTHON = "3.12"                  # Ubuntu 24.04's python3
CUDA_ARCHS = ("80", "90")             # compute capabilities (CUDA 13 has no older ones)

RDMA_CORE = SourceBuild("rdma-core", "55.0")
GDRCOPY = SourceBuild("gdrcopy", "2.4.4")
UCX = SourceBuild("ucx", "1.18.0")
LIBFABRIC = SourceBuild(
    "libfabric", "2.1.0",
    "https://github.com/ofiwg/libfabric/releases/download/v2.1.0/libfabric-2.1.0.tar.bz2")
PMIX = SourceBuild("pmix", "4.2.9")
OPENMPI = SourceBuild("openmpi", "4.1.8")
NCCL = SourceBuild("nccl", "2.30.7-1")   # same NCCL as torch's nvidia-nccl-cu13 wheel
AWS_OFI_NCCL = SourceBuild(
    "aws-ofi-nccl", "1.17.2",
    "https://github.com/aws/aws-ofi-nccl/releases/download/v1.17.2/aws-ofi-nccl-1.17.2.tar.gz")
LIBPSM2 = SourceBuild(
    "libpsm2", "11.2.230",
    "https://github.com/cornelisnetworks/opa-psm2/archive/refs/tags/PSM2_11.2.230.tar.gz")
SOURCE_BUILDS = (RDMA_CORE, GDRCOPY, UCX, LIBFABRIC, PMIX, OPENMPI, NCCL, AWS_OFI_NCCL, LIBPSM2)

# cpu flavour -------------------------------------------------------------
DEBIAN_SUITE = "bookworm"
DEBIAN_PYTHON = "3.11"                # bookworm's python3, as the host venv
# What bookworm ships; each image's %test checks the MPI/UCX/libfabric ones.
DEBIAN_VERSIONS = {"openmpi": "4.1.4", "ucx": "1.13.1", "libfabric": "1.17.0",
                   "rdma-core": "44.0", "libpsm2": "11.2.185"}
BASE_IMAGE_TAG = "localhost/fabric-bench-base:bookworm"   # podman's name for the base

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
    return {"torch": pins["torch"], "torchvision": pins["torchvision"],
            "tensorflow": pins["tensorflow-cpu"], "horovod": HOROVOD_VERSION,
            "numpy": pins["numpy"], "mpi4py": pins["mpi4py"]}


def versions(flavour: str) -> dict[str, str]:
    """Every pinned version of a flavour, as the image's labels carry them."""
    if flavour == "cuda":
        stack = {"base": CUDA_DEVEL_IMAGE, "cuda": CUDA_VERSION, "python": CUDA_PYTHON}
        stack |= {build.name: build.version for build in SOURCE_BUILDS}
    else:
        stack = {"base": f"local/debian:{DEBIAN_SUITE}-minbase", "python": DEBIAN_PYTHON}
        stack |= DEBIAN_VERSIONS
    return stack | python_versions()
