"""A stack image per flavour: cpu (the cuda flavour's communication stack with CUDA off, on a
Debian bookworm base), cpu-debian (Debian's packaged stack, one stage) and cuda (a devel stage
builds the stack on NVIDIA's CUDA base; the runtime stage copies what runs)."""

from __future__ import annotations

from hpccm.primitives import baseimage, comment, copy, shell
from hpccm.building_blocks import apt_get, generic_build

from containers import stack
from containers.placeholders import LOCAL_DEVEL_BASE, LOCAL_RUNTIME_BASE
from containers.stack_blocks import (
    BUILD_PACKAGES,
    CUDA_RUNTIME_PACKAGES,
    RUNTIME_PACKAGES,
    bundle_files,
    common_blocks,
    python_site,
    runtime_copies,
    wheelhouse_venv,
)

CPU_DISTRO = "ubuntu22"  # hpccm's name for an apt distribution (the cpu base is Debian bookworm)


# cpu: Debian bookworm base, the cuda flavour's communication stack with CUDA off ---
def cpu_start(base: str, fmt: str, name: str):
    if fmt == "singularity":
        return baseimage(
            image=base or "base.sif", _bootstrap="localimage", _distro=CPU_DISTRO, _docker_env=False, _as=name
        )
    return baseimage(image=stack.BASE_IMAGE_TAG, _distro=CPU_DISTRO, _as=name)


def cpu_stack(base: str, fmt: str) -> list[list]:
    devel_base = cpu_start(base, fmt, "devel")  # first: hpccm's blocks render for the distribution it sets
    blocks = common_blocks((), cuda=False)
    devel = [
        devel_base,
        comment("common stack: the site images' communication stack (the same blocks, versions and flags), CUDA off"),
        apt_get(ospackages=["python3", *BUILD_PACKAGES]),  # rdma-core's cmake runs python3
        *blocks,
    ]
    runtime = [
        cpu_start(base, fmt, "runtime"),
        comment("common stack: what runs, copied from the devel stage; Python venv"),
        apt_get(ospackages=list(RUNTIME_PACKAGES)),
        *runtime_copies(blocks),
        *wheelhouse_venv(),
        *bundle_files(),
    ]
    return [devel, runtime]


# cpu-debian: the same base, Debian's packaged communication stack, one stage ---
def debian_stack(base: str, fmt: str) -> list[list]:
    return [
        [
            cpu_start(base, fmt, "runtime"),
            comment("common stack: Debian's Open MPI (UCX, libfabric, PMIx inside), Python venv"),
            apt_get(
                ospackages=[
                    "python3",
                    "python3-venv",
                    "openmpi-bin",
                    "ucx-utils",
                    "libfabric-bin",
                    "ca-certificates",
                    "file",
                ]
            ),
            *wheelhouse_venv(deterministic=True),
            comment(
                "what differs between two builds and is not the stack: dates in package logs "
                "and caches (containers/manifest.py)"
            ),
            shell(commands=[f"rm -f {' '.join(BUILD_DATED)}"]),
            *bundle_files(),
        ]
    ]


# Files whose content is the build's date, not the stack (`image verify --rebuild` found them)
BUILD_DATED = (
    "/var/log/dpkg.log",
    "/var/log/alternatives.log",
    "/var/log/apt/history.log",
    "/var/log/apt/term.log",
    "/var/cache/apt/pkgcache.bin",
    "/var/cache/apt/srcpkgcache.bin",
    "/var/cache/ldconfig/aux-cache",
)


# cuda: a devel stage builds the communication stack; the runtime stage copies --
def cuda_bases(base: str, fmt: str) -> tuple:
    if base == "local":
        if fmt == "singularity":
            return (
                baseimage(
                    image=LOCAL_DEVEL_BASE,
                    _bootstrap="localimage",
                    _distro=stack.CUDA_DISTRO,
                    _docker_env=False,
                    _as="devel",
                ),
                baseimage(
                    image=LOCAL_RUNTIME_BASE,
                    _bootstrap="localimage",
                    _distro=stack.CUDA_DISTRO,
                    _docker_env=False,
                    _as="runtime",
                ),
            )
        return (
            baseimage(image=stack.LOCAL_CUDA_DEVEL_TAG, _distro=stack.CUDA_DISTRO, _as="devel"),
            baseimage(image=stack.LOCAL_CUDA_RUNTIME_TAG, _distro=stack.CUDA_DISTRO, _as="runtime"),
        )
    return (
        baseimage(image=stack.CUDA_DEVEL_IMAGE, _distro=stack.CUDA_DISTRO, _as="devel"),
        baseimage(image=stack.CUDA_RUNTIME_IMAGE, _distro=stack.CUDA_DISTRO, _as="runtime"),
    )


def cuda_stack(base: str, omit: tuple[str, ...], fmt: str) -> list[list]:
    devel_base, runtime_base = cuda_bases(base, fmt)
    devel = [devel_base, comment("common stack, built from source")]
    # patchelf: nccl-tests' binaries find the NCCL wheel's library by their RUNPATH
    devel.append(apt_get(ospackages=["python3", "python3-venv", "python3-dev", "patchelf", *BUILD_PACKAGES]))
    blocks = common_blocks(omit)
    devel += blocks
    site = python_site()
    nccl = f"{site}/nvidia/nccl"
    venv_cmds = [
        f"python3 -m venv {stack.VENV}",
        f"sed 's/^tensorflow_cpu==/tensorflow==/' {stack.PREFIX}/src/requirements.txt > /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps -r {stack.PREFIX}/src/requirements-nodeps.txt",
        # Horovod's --no-build-isolation build needs these in the venv (pinned as the host's)
        f"{stack.VENV}/bin/pip install --no-cache-dir setuptools==84.2.1 wheel==0.48.0",
        # NCCL: torch's own nvidia-nccl-cu13 wheel (containers/sources.py); Horovod links it too
        f"ln -sf libnccl.so.2 {nccl}/lib/libnccl.so",
        # TensorFlow's CUDA 12 libraries (its and-cuda extra, pinned): in their own folder, as
        # nvidia-nccl-cu12 and nvidia-cudnn-cu12 would overwrite torch's CUDA 13 NCCL and cuDNN
        # (the same nvidia/nccl, nvidia/cudnn paths); bench.tf_cuda puts them on a TensorFlow
        # process's library path
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps --target {stack.TF_CUDA_DIR} "
        f"-r {stack.PREFIX}/src/{stack.TF_CUDA_REQUIREMENTS.name}",
        # Horovod 0.28.1 with the project's patch and NCCL GPU operations
        f"PATH=/usr/local/openmpi/bin:$PATH HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED "
        f"HOROVOD_NCCL_HOME={nccl} CUDA_HOME=/usr/local/cuda "
        f"HOROVOD_BUILD_CUDA_CC_LIST={','.join(stack.CUDA_ARCHS)} "
        f"{stack.PREFIX}/src/horovod/build-wheel.sh {stack.VENV}/bin/python /tmp/horovod",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps /tmp/horovod/horovod-*/horovod-*.whl",
        # Horovod a second time, with MPI GPU operations (the CUDA-aware Open MPI moves GPU tensors):
        # its own folder, first on PYTHONPATH under `--allreduce mpi` (stack.HOROVOD_MPI_GPU_DIR)
        f"PATH=/usr/local/openmpi/bin:$PATH HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=MPI "
        f"CUDA_HOME=/usr/local/cuda HOROVOD_BUILD_CUDA_CC_LIST={','.join(stack.CUDA_ARCHS)} "
        f"{stack.PREFIX}/src/horovod/build-wheel.sh {stack.VENV}/bin/python /tmp/horovod-mpi-gpu",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps --target {stack.HOROVOD_MPI_GPU_DIR} "
        "/tmp/horovod-mpi-gpu/horovod-*/horovod-*.whl",
        "rm -rf /tmp/horovod /tmp/horovod-mpi-gpu /tmp/requirements-gpu.txt",
    ]
    devel += [
        copy(
            src=["requirements.txt", "requirements-nodeps.txt", stack.TF_CUDA_REQUIREMENTS.name],
            dest=f"{stack.PREFIX}/src/",
        ),
        copy(src="containers/horovod", dest=f"{stack.PREFIX}/src/horovod"),
        shell(commands=venv_cmds),
    ]
    tests = nccl_tests_block(nccl)
    devel.append(tests)

    runtime = [
        runtime_base,
        comment("common stack: what runs, copied from the devel stage"),
        apt_get(ospackages=[*RUNTIME_PACKAGES, *CUDA_RUNTIME_PACKAGES]),
    ]
    runtime += runtime_copies(blocks)
    runtime += [
        copy(_from="devel", src=stack.VENV, dest=stack.VENV),
        copy(_from="devel", src=stack.TF_CUDA_DIR, dest=stack.TF_CUDA_DIR),
        copy(_from="devel", src=stack.HOROVOD_MPI_GPU_DIR, dest=stack.HOROVOD_MPI_GPU_DIR),
        tests.runtime(_from="devel"),
        shell(commands=[f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth"]),
        *bundle_files(),
    ]
    return [devel, runtime]


def nccl_tests_block(nccl: str):
    """nccl-tests with MPI=1 (one rank per GPU under mpirun) against the stack's Open MPI and the
    NCCL wheel torch loads (`nccl`: its folder), for the architectures the stack targets; the
    binaries' RUNPATH names the wheel's lib/ (NCCL's folder is on no library path: TensorFlow's
    CUDA 12 NCCL must not meet it)."""
    gencode = " ".join(f"-gencode=arch=compute_{arch},code=sm_{arch}" for arch in stack.CUDA_ARCHS)
    bin_dir = f"{stack.NCCL_TESTS_PREFIX}/bin"
    return generic_build(
        url=stack.NCCL_TESTS.url,
        directory=f"nccl-tests-{stack.NCCL_TESTS.version}",
        prefix=stack.NCCL_TESTS_PREFIX,
        build=[
            f'make -j$(nproc) MPI=1 MPI_HOME=/usr/local/openmpi CUDA_HOME=/usr/local/cuda NCCL_HOME="{nccl}" '
            f'NVCC_GENCODE="{gencode}"'
        ],
        install=[
            f"mkdir -p {bin_dir}",
            f"cp build/*_perf {bin_dir}/",
            f'patchelf --set-rpath "{nccl}/lib" {bin_dir}/*_perf',
        ],
        runtime_environment={"PATH": f"{bin_dir}:$PATH"},
    )
