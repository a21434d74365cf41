"""Issue 49, as renders: the cuda recipes for NVIDIA's CUDA Ubuntu 24.04 base (Python 3.12) carry a
CUDA-aware MPI (UCX 1.22.0 with CUDA, gdrcopy and threads; Open MPI with CUDA against it),
nccl-tests, a second Horovod with MPI GPU operations at stack.HOROVOD_MPI_GPU_DIR, and the
Slingshot plugin built against libfabric 1.20; the self-test asks for each and reports it."""

from __future__ import annotations

import re

import pytest

from containers import recipe, sources, stack
from containers.fabrics import profile


@pytest.fixture(scope="module")
def site():
    return recipe.render_stack("cuda", commit="x")


def stages(dockerfile: str) -> list[str]:
    return re.split(r"(?m)^FROM ", dockerfile)[1:]


def test_the_site_recipe_is_for_nvidias_cuda_13_ubuntu_24_04_base_with_python_3_12(site):
    devel, runtime = stages(site.dockerfile)
    assert re.match(r"nvidia/cuda:13\.\d+\.\d+-devel-ubuntu24\.04 AS devel", devel)
    assert re.match(r"nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu24\.04 AS runtime", runtime)
    assert stack.CUDA_DISTRO == "ubuntu24" and stack.CUDA_PYTHON == "3.12"
    assert "org.fabric-bench.version.python=3.12" in site.dockerfile
    assert f"org.fabric-bench.version.base={stack.CUDA_DEVEL_IMAGE}" in site.dockerfile
    # Ubuntu 24.04's python3 (3.12) makes the venv; its %test asks for that Python
    assert "python3 -m venv /opt/fabric-bench/venv" in devel
    assert "python=3.12" in site.definition.split("%test", 1)[1]
    # the Apptainer definition starts from the same registry images
    assert f"From: {stack.CUDA_DEVEL_IMAGE}" in site.devel_definition


def test_the_rehearsal_differs_only_in_its_base_and_says_which(site):
    local = recipe.render_stack("cuda", base="local", commit="x")
    assert stack.versions("cuda", "local")["base"].startswith("local/debian:")
    assert stack.versions("cuda", "local")["python"] == stack.DEBIAN_PYTHON
    for name in ("ucx", "openmpi", "nccl-tests"):
        assert sources.source(name).site_url in local.dockerfile and sources.source(name).site_url in site.dockerfile


def test_ucx_1_22_is_built_with_cuda_gdrcopy_and_threads_and_open_mpi_against_it(site):
    pinned = sources.source("ucx").rehearsal
    assert stack.UCX.version == "1.22.0" and pinned is not None and pinned.registry == "shared"
    configure = next(line for line in site.dockerfile.splitlines() if "cd /var/tmp/ucx-1.22.0 &&" in line)
    for flag in ("--with-cuda=/usr/local/cuda", "--with-gdrcopy=/usr/local/gdrcopy", "--enable-mt"):
        assert flag in configure, flag
    ompi = next(line for line in site.dockerfile.splitlines() if "./configure --prefix=/usr/local/openmpi" in line)
    assert "--with-cuda" in ompi.split() and "--with-ucx=/usr/local/ucx" in ompi
    assert "--enable-mca-no-build=btl-uct" in ompi
    assert site.dockerfile.index("ucx-1.22.0.tar.gz") < site.dockerfile.index("openmpi-4.1.4.tar.bz2")
    assert "org.fabric-bench.version.ucx=1.22.0" in site.dockerfile


def test_nccl_tests_are_built_with_mpi_against_the_stacks_open_mpi_and_nccl(site):
    devel, runtime = stages(site.dockerfile)
    make = next(line for line in devel.splitlines() if "make -j$(nproc) MPI=1" in line)
    assert "MPI_HOME=/usr/local/openmpi" in make and "CUDA_HOME=/usr/local/cuda" in make
    assert "/nvidia/nccl" in make.split("NCCL_HOME=", 1)[1]
    for arch in stack.CUDA_ARCHS:
        assert f"code=sm_{arch}" in make
    # after the venv (NCCL is torch's wheel); the binaries find it by their RUNPATH
    assert devel.index("python3 -m venv") < devel.index(sources.source("nccl-tests").site_url)
    assert "patchelf --set-rpath" in devel
    assert f"COPY --from=devel {stack.NCCL_TESTS_PREFIX} {stack.NCCL_TESTS_PREFIX}" in runtime
    assert f"{stack.NCCL_TESTS_PREFIX}/bin:$PATH" in runtime


def test_horovod_is_built_twice_the_second_with_mpi_gpu_operations_in_its_own_folder(site):
    devel, runtime = stages(site.dockerfile)
    builds = [line for line in devel.splitlines() if "build-wheel.sh" in line]
    assert len(builds) == 2
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in builds[0] and "HOROVOD_GPU_OPERATIONS=MPI" in builds[1]
    assert "HOROVOD_GPU=CUDA" in builds[1] and "PATH=/usr/local/openmpi/bin:" in builds[1]
    assert f"--target {stack.HOROVOD_MPI_GPU_DIR} " in devel
    assert f"COPY --from=devel {stack.HOROVOD_MPI_GPU_DIR} {stack.HOROVOD_MPI_GPU_DIR}" in runtime
    assert f"{stack.HOROVOD_MPI_GPU_ENV}={stack.HOROVOD_MPI_GPU_DIR}" in runtime
    # `--allreduce mpi` selects it (launch code reads stack.HOROVOD_BUILDS)
    assert stack.HOROVOD_BUILDS == {"nccl": "", "mpi": stack.HOROVOD_MPI_GPU_DIR}
    assert stack.HOROVOD_MPI_GPU_DIR.startswith(stack.PREFIX + "/")


def test_the_cuda_self_test_asks_for_and_reports_every_new_component():
    argv = recipe.self_test_argv(None, "cuda")
    for check in (
        "ompi-report",
        "ucx-report",
        "ucx:cuda_copy",
        "ucx:cuda_ipc",
        "ucx:gdr_copy",
        "horovod-gpu-ops:nccl",
        f"horovod-gpu-ops:mpi:{stack.HOROVOD_MPI_GPU_DIR}",
        f"nccl-tests:{stack.NCCL_TESTS_PREFIX}",
    ):
        assert check in argv, check
    script = (stack.REPO / "containers" / "image-test.sh").read_text()
    for case in ("ompi-report)", "ucx-report)", "horovod-gpu-ops:*)", "nccl-tests:*)", "fi-abi-plugin:*)"):
        assert case in script, case
    # the cpu flavour's self-test is as before
    assert not [a for a in recipe.self_test_argv(None, "cpu") if "report" in a or "horovod-gpu-ops" in a]


def test_the_slingshot_plugin_needs_the_option_declared_and_no_abi_above_current_hosts():
    site = recipe.self_test_argv(profile("slingshot"), "cuda")
    assert "aws-ofi-nccl-build:hmem" in site and f"fi-abi-plugin:{stack.LIBFABRIC_SHS_ABI}" in site
    assert stack.LIBFABRIC_SHS.version.startswith("1.20.") and stack.LIBFABRIC_SHS_ABI == "FABRIC_1.7"
    # the rehearsal (libfabric 1.20 omitted: no source here) reports what it was built against
    local = recipe.self_test_argv(profile("slingshot"), "cuda", sources.omitted(), "local")
    assert "aws-ofi-nccl-build" in local and not [a for a in local if a.startswith("fi-abi-plugin")]
    efa = recipe.self_test_argv(profile("efa"), "cuda", sources.omitted(), "local")
    assert "aws-ofi-nccl-build:hmem" in efa
    text = recipe.render("slingshot", "cuda", commit="x").dockerfile
    assert recipe.LIBFABRIC_SHS_PREFIX + "/lib/pkgconfig" in text and "built-against.txt" in text
