"""The common stack as hpccm pieces: the communication libraries built from source (the same
blocks and flags for cuda and cpu), the packages each stage needs, the Python stack from the
wheelhouse, and the bundle's own files. containers.stack_recipes assembles them per flavour."""

from __future__ import annotations

from hpccm.building_blocks import gdrcopy, generic_autotools, generic_build, openmpi, pmix, rdma_core, slurm_pmi2, ucx
from hpccm.primitives import comment, copy, environment, shell

from containers import sources, stack

IMAGE_TEST = f"{stack.PREFIX}/bin/fabric-bench-image-test"
SLURM_PMI2 = stack.SourceBuild("slurm-pmi2", sources.source("slurm-pmi2").version)


# What the runtime stage needs beside what it copies from the devel stage
RUNTIME_PACKAGES = (
    "python3",
    "python3-venv",
    "libnuma1",
    "openssh-client",
    "ca-certificates",
    "libhwloc15",
    "libevent-2.1-7",
    "libevent-pthreads-2.1-7",
    "file",
)
# What the cuda runtime adds: UCX 1.22's perftest modules (libucx_perftest_mad) link OpenMP
CUDA_RUNTIME_PACKAGES = ("libgomp1",)
# What the devel stage builds the communication stack with
BUILD_PACKAGES = (
    "git",
    "wget",
    "bzip2",
    "make",
    "g++",
    "cmake",
    "patch",
    "pkg-config",
    "file",
    "perl",
    "flex",
    "libnuma-dev",
    "uuid-dev",
    "ca-certificates",
    # PMIx and Open MPI share one hwloc and one libevent (external PMIx requires it)
    "libhwloc-dev",
    "libevent-dev",
)


def python_site() -> str:
    return f"$({stack.VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"


# A fixed SOURCE_DATE_EPOCH makes pip byte-compile with source hashes instead of the install
# time (py_compile's CHECKED_HASH); a fixed hash seed keeps marshalled sets in one order.
DETERMINISTIC_ENV = "SOURCE_DATE_EPOCH=1767225600 PYTHONHASHSEED=0"


def wheelhouse_venv(deterministic: bool = False) -> list:
    """The cpu flavours' Python stack, installed from the wheelhouse bound at build time
    (cpu-debian: byte-compiled deterministically; the cpu flavour's render is left as its
    rehearsal records it)."""
    site = f"{stack.VENV}/lib/python{stack.DEBIAN_PYTHON}/site-packages"
    return [
        comment(
            f"Python stack from the wheelhouse bound at {stack.WHEELHOUSE} (apptainer build "
            f"--bind DIR:{stack.WHEELHOUSE}; podman build -v DIR:{stack.WHEELHOUSE})"
        ),
        shell(
            commands=[
                *([f"export {DETERMINISTIC_ENV}"] if deterministic else []),
                f"python3 -m venv {stack.VENV}",
                f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --find-links {stack.WHEELHOUSE}"
                f" -r {stack.WHEELHOUSE}/requirements.txt",
                f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps --find-links "
                f"{stack.WHEELHOUSE} -r {stack.WHEELHOUSE}/requirements-nodeps.txt",
                f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps "
                f"{stack.WHEELHOUSE}/horovod-{stack.HOROVOD_VERSION}-*.whl",
                f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth",
            ]
        ),
    ]


def runtime_copies(blocks: list) -> list:
    """What a runtime stage copies of the communication stack from the devel stage: each
    block's install tree, and rdma-core's provider list (/etc/libibverbs.d, what presets bind)."""
    return [
        *(block.runtime(_from="devel") for block in blocks),
        copy(_from="devel", src="/etc/libibverbs.d", dest="/etc/libibverbs.d"),
    ]


def common_blocks(omit: tuple[str, ...], *, cuda: bool = True) -> list:
    """The communication stack built from source; `cuda=False`: the same blocks and flags with
    CUDA (and gdrcopy) off, the cpu flavour's stack."""
    cuda_home = "/usr/local/cuda" if cuda else False
    gdr = cuda and "gdrcopy" not in omit
    psm2 = sources.source("libpsm2")
    libfabric = [
        "--enable-tcp",
        "--enable-shm",
        "--enable-rxm",
        "--enable-verbs=/usr/local/rdma-core",
        "--enable-efa=/usr/local/rdma-core",
        "--enable-psm2=/usr/local/libpsm2",
        "--enable-psm3=no",
    ]
    # CUDA (and gdrcopy) by dlopen: linked directly, libfabric.so needs the driver's libcuda.so.1,
    # so Open MPI's configure cannot link fi_getinfo against it (the stub is libcuda.so) and no
    # libfabric user would start on a node without a GPU driver
    libfabric += [f"--with-cuda={cuda_home}", "--enable-cuda-dlopen"] if cuda else ["--without-cuda"]
    if gdr:
        libfabric += ["--with-gdrcopy=/usr/local/gdrcopy", "--enable-gdrcopy-dlopen"]
    blocks = [
        # providers read /etc/libibverbs.d (the path the infiniband preset binds from the host)
        rdma_core(
            version=stack.RDMA_CORE.version,
            prefix="/usr/local/rdma-core",
            cmake_opts=["-DCMAKE_INSTALL_SYSCONFDIR=/etc", "-DNO_MAN_PAGES=1"],
            ospackages=["libudev-dev", "libnl-3-dev", "libnl-route-3-dev", "make", "pkg-config", "wget"],
        ),  # no pandoc/docutils: no man pages
    ]
    if gdr:
        blocks.append(gdrcopy(version=stack.GDRCOPY.version, prefix="/usr/local/gdrcopy"))
    blocks += [
        # libpsm2 in the common stack: Open MPI's psm2 MTL (omnipath preset) is built against it.
        # Without PSM_CUDA: a CUDA build needs the CUDA hfi1 driver headers (HFI1_CAP_GPUDIRECT_OT),
        # which neither kernel headers nor the source carry.
        generic_build(
            url=psm2.site_url,
            directory=f"opa-psm2-PSM2_{psm2.version}",
            prefix="/usr/local/libpsm2",
            build=["make -j$(nproc) WERROR="],  # gcc 12+ warnings (array-bounds) are errors otherwise
            # the Makefile installs headers under $DESTDIR/usr/include: give --with-psm2 its include/
            install=[
                "make install DESTDIR=/usr/local/libpsm2 INSTALL_LIB_TARG=/lib WERROR=",
                "ln -sfn usr/include /usr/local/libpsm2/include",
            ],
            devel_environment={"LD_LIBRARY_PATH": "/usr/local/libpsm2/lib:$LD_LIBRARY_PATH"},
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/libpsm2/lib:$LD_LIBRARY_PATH"},
        ),
        ucx_block(cuda_home, gdr),
        libfabric_block(libfabric),
        # Slurm >= 23.11's configure stops without munge; libpmi2 does not use it
        slurm_pmi2(version=SLURM_PMI2.version, prefix="/usr/local/slurm-pmi2", configure_opts=["--without-munge"]),
        pmix(
            version=stack.PMIX.version,
            prefix="/usr/local/pmix",
            ospackages=["file", "libhwloc-dev", "libevent-dev", "make", "tar", "wget", "perl"],
        ),
        openmpi_block(cuda, ofi="/usr/local/libfabric"),
    ]
    return blocks


def ucx_block(cuda_home: str | bool, gdr: bool):
    """The stack's UCX. cuda: 1.22.0 (stack.UCX) with CUDA, gdrcopy and thread support, what a
    CUDA-aware Open MPI under Horovod needs (issue 49); cpu: bookworm's 1.13.1 (stack.UCX_CPU),
    its flags as before (the cpu images and their records unchanged)."""
    configure_opts = [
        "--enable-optimizations",
        "--disable-logging",
        "--disable-debug",
        "--disable-assertions",
        "--disable-params-check",
        "--disable-doxygen-doc",
        # UCX 1.13's backtraces use binutils' PTR macro, gone from bfd.h since binutils 2.40
        # (bookworm, Ubuntu 24.04): debug.c stops at "'PTR' undeclared"; no backtraces in 1.22 either
        "--without-bfd",
    ]
    if cuda_home:
        # Horovod initialises MPI with MPI_THREAD_MULTIPLE, and Open MPI's pml ucx disqualifies
        # itself when UCX's worker cannot run multi-threaded (pml_ucx.c): GPU tensors then never
        # reach UCX's CUDA transports
        configure_opts.append("--enable-mt")
        # UCX 1.22's GPU-initiated side (the GDA-KI transport and the nvcc-compiled device code
        # that includes its headers) needs DOCA's gpunetio headers, a git submodule that a source
        # tree from git lacks (gdaki.c, then ucp_cuda_kernel.cu: doca_gpunetio_* not found).
        # CUDA-aware MPI uses the host-initiated transports (cuda_copy, cuda_ipc, gdr_copy) only:
        # no GDA-KI, and an nvcc that fails configure's version check, so no device code
        configure_opts += ["--without-gda", "NVCC=/bin/false"]
    return ucx(
        version=(stack.UCX if cuda_home else stack.UCX_CPU).version,
        prefix="/usr/local/ucx",
        cuda=cuda_home,
        gdrcopy="/usr/local/gdrcopy" if gdr else False,
        ofed="/usr/local/rdma-core",
        knem=False,
        xpmem=False,
        ospackages=["file", "libnuma-dev", "make", "wget"],
        configure_opts=configure_opts,
        # UCX's test programs (not installed) include test_cuda_hook.c, which 1.13 wrote for the
        # pre-CUDA-13 cuCtxCreate(ctx, flags, dev): their folder is not built
        postconfigure=["printf 'all install check clean distclean:\\n\\t@true\\n' > test/apps/Makefile"],
    )


def openmpi_block(cuda: bool, ofi: str):
    """The stack's Open MPI; `ofi`: the libfabric its ofi components link ("": the default paths)."""
    return openmpi(
        version=stack.OPENMPI.version,
        prefix="/usr/local/openmpi",
        cuda=cuda,
        infiniband=False,
        ucx="/usr/local/ucx",
        pmix="/usr/local/pmix",
        pmi="/usr/local/slurm-pmi2",
        configure_opts=[
            "--enable-mpi-cxx",
            "--enable-orterun-prefix-by-default",
            f"--with-ofi={ofi}" if ofi else "--with-ofi",
            "--with-psm2=/usr/local/libpsm2",
            "--with-slurm",
            "--with-libevent=/usr",
            "--with-hwloc=/usr",
            # the uct BTL follows UCX's unstable UCT API (Open MPI 4.1.4 predates UCX 1.22) and no
            # preset selects it: UCX reaches Open MPI through pml ucx (and osc ucx) only
            *(["--enable-mca-no-build=btl-uct"] if cuda else []),
        ],
        # libfabric 2.0 took container_of out of its public headers; Open MPI 4.1.4's
        # ofi MTL still uses it (later 4.1.x define it themselves): define it the same way
        postconfigure=[_define_container_of("ompi/mca/mtl/ofi/mtl_ofi_request.h")],
    )


def _define_container_of(header: str) -> str:
    lines = [
        "#include <stddef.h>",
        "#ifndef container_of",
        "#define container_of(ptr, type, member) ((type *) ((char *) (ptr) - offsetof(type, member)))",
        "#endif",
    ]
    quoted = " ".join(f"'{line}'" for line in lines)
    return f"printf '%s\\n' {quoted} | cat - {header} > {header}.new && mv {header}.new {header}"


def libfabric_block(configure_opts: list[str]):
    env = {"PATH": "/usr/local/libfabric/bin:$PATH", "LD_LIBRARY_PATH": "/usr/local/libfabric/lib:$LD_LIBRARY_PATH"}
    return generic_autotools(
        url=sources.source("libfabric").site_url,
        prefix="/usr/local/libfabric",
        configure_opts=configure_opts,
        devel_environment=env,
        runtime_environment=env,
    )


# the bundle's files and environment -----------------------------------------
def bundle_files() -> list:
    return [
        comment("the bundle: bench/ and the image self-test"),
        copy(src="bench", dest=f"{stack.BENCH_PARENT}/bench"),
        copy(src="containers/image-test.sh", dest=IMAGE_TEST),
    ]


def common_environment(flavour: str) -> environment:
    return environment(
        variables={
            "PATH": f"{stack.VENV}/bin:{stack.PREFIX}/bin:$PATH",
            # Lets mpirun run as root inside the image (CI runs as root); no effect otherwise.
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "FABRIC_BENCH_FLAVOUR": flavour,
            # TensorFlow's CUDA 12 libraries (bench.tf_cuda): the cuda flavour only
            **({"FABRIC_BENCH_TF_CUDA": stack.TF_CUDA_DIR} if flavour == "cuda" else {}),
            # Horovod with MPI GPU operations (stack.HOROVOD_BUILDS): the cuda flavour only
            **({stack.HOROVOD_MPI_GPU_ENV: stack.HOROVOD_MPI_GPU_DIR} if flavour == "cuda" else {}),
        }
    )
