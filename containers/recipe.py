"""One hpccm recipe: a stack image per flavour, and any (fabric, flavour) image FROM it.

The stack image holds the common stack (communication libraries, Python
stack, bench/): identical for every fabric, built once. A fabric image is the
stack image plus its fabric layer only, between `# >>> fabric layer` /
`# <<< fabric layer` markers (`Bootstrap: localimage` / `FROM` the stack), and
carries the stack image's digest in its labels: "images differ only in
fabric libraries" is an equality of digests.

Both flavours build the same communication stack (`common_blocks`; `cpu` with
CUDA off) in a devel stage and copy what runs into a runtime stage; for
Apptainer the stack's devel stage is its own image (stack-devel.sif), so a
fabric layer that builds something (aws-ofi-nccl) starts from it, and a change
to bench/ rebuilds only the runtime stage. `cpu-debian` is one stage with
Debian's packaged communication stack (CI's cold path). The cpu flavours'
Python stack installs from a wheelhouse bound at /wheelhouse during the build
(no wheels in the image).

Bases: `base="site"` (the default) renders the site recipe: nvidia/cuda
images for cuda. `base="local"` renders the rehearsal recipe, whose only
difference is its base lines (containers/cudabase.py; a test shows the diff).
Paths that depend on where a machine keeps its images (local bases, the
stack image) are placeholders in the text the recipe hash names, filled in by
`Recipe.filled()`: the hash is the same on every machine.
"""
from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import hpccm
from hpccm.building_blocks import (apt_get, gdrcopy, generic_autotools, generic_build, openmpi, pmix,
                                   rdma_core, slurm_pmi2, ucx)
from hpccm.primitives import baseimage, comment, copy, environment, label, shell

from containers import sources, stack
from containers.fabrics import FabricProfile, profile

FABRIC_BEGIN, FABRIC_END = ">>> fabric layer", "<<< fabric layer"
LABEL_PREFIX = "org.fabric-bench"
HASH_PLACEHOLDER = "@RECIPE_HASH@"
COMMIT_PLACEHOLDER = "@BUNDLE_COMMIT@"
STACK_DIGEST = "@STACK_DIGEST@"                  # sha256 of the stack image, known once built
STACK_IMAGE, STACK_DEVEL_IMAGE = "@STACK_IMAGE@", "@STACK_DEVEL_IMAGE@"
LOCAL_DEVEL_BASE, LOCAL_RUNTIME_BASE = "@LOCAL_DEVEL_BASE@", "@LOCAL_RUNTIME_BASE@"
BASES = ("site", "local")
CPU_DISTRO = "ubuntu22"       # hpccm's name for an apt distribution (the cpu base is Debian bookworm)
IMAGE_TEST = f"{stack.PREFIX}/bin/fabric-bench-image-test"
SLURM_PMI2 = stack.SourceBuild("slurm-pmi2", sources.source("slurm-pmi2").version)
# Shared libraries the host driver brings (apptainer --nv); absent from images by design.
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
SOURCE_STACKS = ("cuda", "cpu")      # the flavours whose communication stack is built here
# A fabric whose host libfabric replaces the image's (Slingshot's cxi) gets the stack's libfabric
# users linked again against the oldest host ABI supported: the distribution's libfabric-dev
# (1.17.0 in Debian 12; ABI FABRIC_1.6, as every release from 1.14 to 1.19), where the stack's
# libfabric 2.1 makes them need FABRIC_1.8, which the 1.20-1.22 of SHS 12 hosts lack; its
# libfabric-bin brings an fi_info of that ABI (preflight and the probe run fi_info inside)
HOST_ABI_PACKAGES, HOST_ABI_NODE = ("libfabric-dev", "libfabric-bin"), "FABRIC_1.6"
HOST_ABI_STAGE = "/usr/local/openmpi-host-abi"      # the relinked libfabric users, devel -> runtime


@dataclass(frozen=True)
class Recipe:
    fabric: str                  # "stack" for a stack image
    flavour: str
    template: str                # Apptainer .def with path placeholders
    dockerfile: str
    recipe_hash: str             # sha256 of the template without this hash and the commit
    devel_template: str = ""     # cuda stack, Apptainer: the devel stage as its own image
    base: str = "site"
    omitted: tuple[str, ...] = ()
    paths: Mapping[str, str] = field(default_factory=dict)

    def filled(self, **paths: str) -> "Recipe":
        """The same recipe with placeholders (LOCAL_DEVEL_BASE=..., STACK_IMAGE=...) filled."""
        return replace(self, paths={**self.paths, **{f"@{k}@": v for k, v in paths.items()}})

    def _fill(self, text: str) -> str:
        defaults = {STACK_IMAGE: f"fabric-bench-stack-{self.flavour}.sif",
                    STACK_DEVEL_IMAGE: f"fabric-bench-stack-{self.flavour}-devel.sif",
                    LOCAL_DEVEL_BASE: "cuda-devel.sif", LOCAL_RUNTIME_BASE: "cuda-runtime.sif",
                    STACK_DIGEST: "unbuilt"}
        for key, value in {**defaults, **self.paths}.items():
            text = text.replace(key, value)
        return text

    @property
    def definition(self) -> str:
        return self._fill(self.template)

    @property
    def devel_definition(self) -> str:
        return self._fill(self.devel_template)


def _check(fabric: str, flavour: str, base: str) -> FabricProfile | None:
    prof = profile(fabric) if fabric != "stack" else None
    if flavour not in stack.FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; choose from {', '.join(stack.FLAVOURS)}")
    if base not in BASES:
        raise ValueError(f"unknown base {base!r}; choose from {', '.join(BASES)}")
    return prof


def render(fabric: str, flavour: str, *, base: str = "site", cpu_base: str = "", commit: str = "",
           omit: Iterable[str] = ()) -> Recipe:
    """Render the image of (fabric, flavour) FROM its stack image, or the stack image
    itself with fabric="stack". `cpu_base`: the cpu flavour's local base .sif (default
    base.sif; the Dockerfile always names stack.BASE_IMAGE_TAG). `omit`: components a
    rehearsal cannot fetch (sources.omitted()); the site recipe omits nothing."""
    prof = _check(fabric, flavour, base)
    omit = tuple(sorted(set(omit)))
    commit = commit or bundle_commit()
    texts: dict[str, str] = {}
    devel_text = ""
    for fmt in ("singularity", "docker"):
        # hpccm renders some pieces (block.runtime()) when they are made: set the format first
        hpccm.config.set_container_format(fmt)
        hpccm.config.set_singularity_version("3.5")   # multi-stage: %files from <stage>
        try:
            if prof is None and flavour == "cuda":
                stages = _cuda_stack(base, omit, fmt)
            elif prof is None and flavour == "cpu":
                stages = _cpu_stack(cpu_base, fmt)
            elif prof is None:
                stages = _debian_stack(cpu_base, fmt)
            else:
                stages = _fabric_stages(prof, flavour, omit, fmt)
            if prof is None and fmt == "singularity" and len(stages) > 1:
                # Apptainer: the devel stage is its own image; the stack copies from it
                devel_text = _to_text([stages[0]], "stack", flavour, omit=omit, base=base)
                distro = stack.CUDA_DISTRO if flavour == "cuda" else CPU_DISTRO
                stages[0] = [baseimage(image=STACK_DEVEL_IMAGE, _bootstrap="localimage",
                                       _distro=distro, _docker_env=False, _as="devel")]
            texts[fmt] = _to_text(stages, fabric, flavour, omit=omit, base=base)
        finally:
            hpccm.config.set_container_format("docker")
    template = (texts["singularity"] + _setup(flavour, fabric) + _help(prof, flavour, base)
                + _test(prof, flavour, omit, base))
    devel_template = devel_text + (_setup(flavour, fabric) if devel_text else "")
    # The hash names the content, not the commit it was rendered at (builds are cached by it).
    digest = hashlib.sha256((template + devel_template).encode()).hexdigest()

    def final(text: str) -> str:
        return text.replace(HASH_PLACEHOLDER, digest).replace(COMMIT_PLACEHOLDER, commit)
    return Recipe(fabric, flavour, final(template), final(texts["docker"]), digest,
                  final(devel_template), base, omit)


def render_stack(flavour: str, **kwargs) -> Recipe:
    return render("stack", flavour, **kwargs)


def bundle_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(stack.REPO), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def stack_tag(flavour: str) -> str:
    """podman/docker name of the stack image (the Dockerfile of a fabric image is FROM it)."""
    return f"localhost/fabric-bench-stack:{flavour}"


def labels(fabric: str, flavour: str, commit: str, omit: tuple[str, ...] = (),
           base: str = "site") -> dict[str, str]:
    out = {f"{LABEL_PREFIX}.fabric": fabric, f"{LABEL_PREFIX}.flavour": flavour,
           f"{LABEL_PREFIX}.bundle-commit": commit, f"{LABEL_PREFIX}.recipe-hash": HASH_PLACEHOLDER}
    if fabric != "stack":
        out[f"{LABEL_PREFIX}.stack-digest"] = STACK_DIGEST
    if omit:
        out[f"{LABEL_PREFIX}.omitted"] = ",".join(omit)
    out |= {f"{LABEL_PREFIX}.version.{name}": version
            for name, version in stack.versions(flavour, base).items() if name not in omit}
    return out


# cpu: Debian bookworm base, the cuda flavour's communication stack with CUDA off ---
def _cpu_start(base: str, fmt: str, name: str):
    if fmt == "singularity":
        return baseimage(image=base or "base.sif", _bootstrap="localimage", _distro=CPU_DISTRO,
                         _docker_env=False, _as=name)
    return baseimage(image=stack.BASE_IMAGE_TAG, _distro=CPU_DISTRO, _as=name)


def _cpu_stack(base: str, fmt: str) -> list[list]:
    devel_base = _cpu_start(base, fmt, "devel")     # first: hpccm's blocks render for the distribution it sets
    blocks = common_blocks((), cuda=False)
    devel = [devel_base,
             comment("common stack: the site images' communication stack (the same blocks, versions and "
                     "flags), CUDA off"),
             apt_get(ospackages=["python3", *BUILD_PACKAGES]),     # rdma-core's cmake runs python3
             *blocks]
    runtime = [
        _cpu_start(base, fmt, "runtime"),
        comment("common stack: what runs, copied from the devel stage; Python venv"),
        apt_get(ospackages=list(RUNTIME_PACKAGES)),
        *_runtime_copies(blocks),
        *_wheelhouse_venv(),
        *_bundle_files(),
    ]
    return [devel, runtime]


# cpu-debian: the same base, Debian's packaged communication stack, one stage ---
def _debian_stack(base: str, fmt: str) -> list[list]:
    return [[_cpu_start(base, fmt, "runtime"),
             comment("common stack: Debian's Open MPI (UCX, libfabric, PMIx inside), Python venv"),
             apt_get(ospackages=["python3", "python3-venv", "openmpi-bin", "ucx-utils", "libfabric-bin",
                                 "ca-certificates", "file"]),
             *_wheelhouse_venv(deterministic=True),
             comment("what differs between two builds and is not the stack: dates in package logs "
                     "and caches (containers/manifest.py)"),
             shell(commands=[f"rm -f {' '.join(BUILD_DATED)}"]),
             *_bundle_files()]]


# Files whose content is the build's date, not the stack (`image verify --rebuild` found them)
BUILD_DATED = ("/var/log/dpkg.log", "/var/log/alternatives.log", "/var/log/apt/history.log",
               "/var/log/apt/term.log", "/var/cache/apt/pkgcache.bin", "/var/cache/apt/srcpkgcache.bin",
               "/var/cache/ldconfig/aux-cache")
# A fixed SOURCE_DATE_EPOCH makes pip byte-compile with source hashes instead of the install
# time (py_compile's CHECKED_HASH); a fixed hash seed keeps marshalled sets in one order.
DETERMINISTIC_ENV = "SOURCE_DATE_EPOCH=1767225600 PYTHONHASHSEED=0"


def _wheelhouse_venv(deterministic: bool = False) -> list:
    """The cpu flavours' Python stack, installed from the wheelhouse bound at build time
    (cpu-debian: byte-compiled deterministically; the cpu flavour's render is left as its
    rehearsal records it)."""
    site = f"{stack.VENV}/lib/python{stack.DEBIAN_PYTHON}/site-packages"
    return [
        comment(f"Python stack from the wheelhouse bound at {stack.WHEELHOUSE} (apptainer build "
                f"--bind DIR:{stack.WHEELHOUSE}; podman build -v DIR:{stack.WHEELHOUSE})"),
        shell(commands=[
            *([f"export {DETERMINISTIC_ENV}"] if deterministic else []),
            f"python3 -m venv {stack.VENV}",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --find-links {stack.WHEELHOUSE}"
            f" -r {stack.WHEELHOUSE}/requirements.txt",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps --find-links "
            f"{stack.WHEELHOUSE} -r {stack.WHEELHOUSE}/requirements-nodeps.txt",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps "
            f"{stack.WHEELHOUSE}/horovod-{stack.HOROVOD_VERSION}-*.whl",
            f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth",
        ])]


# cuda: a devel stage builds the communication stack; the runtime stage copies --
def _cuda_bases(base: str, fmt: str) -> tuple:
    if base == "local":
        if fmt == "singularity":
            return (baseimage(image=LOCAL_DEVEL_BASE, _bootstrap="localimage", _distro=stack.CUDA_DISTRO,
                              _docker_env=False, _as="devel"),
                    baseimage(image=LOCAL_RUNTIME_BASE, _bootstrap="localimage", _distro=stack.CUDA_DISTRO,
                              _docker_env=False, _as="runtime"))
        return (baseimage(image=stack.LOCAL_CUDA_DEVEL_TAG, _distro=stack.CUDA_DISTRO, _as="devel"),
                baseimage(image=stack.LOCAL_CUDA_RUNTIME_TAG, _distro=stack.CUDA_DISTRO, _as="runtime"))
    return (baseimage(image=stack.CUDA_DEVEL_IMAGE, _distro=stack.CUDA_DISTRO, _as="devel"),
            baseimage(image=stack.CUDA_RUNTIME_IMAGE, _distro=stack.CUDA_DISTRO, _as="runtime"))


def _python_site() -> str:
    return f"$({stack.VENV}/bin/python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"


# What the runtime stage needs beside what it copies from the devel stage
RUNTIME_PACKAGES = ("python3", "python3-venv", "libnuma1", "openssh-client", "ca-certificates", "libhwloc15",
                    "libevent-2.1-7", "libevent-pthreads-2.1-7", "file")
# What the devel stage builds the communication stack with
BUILD_PACKAGES = ("git", "wget", "bzip2", "make", "g++", "cmake", "patch", "pkg-config", "file", "perl", "flex",
                  "libnuma-dev", "uuid-dev", "ca-certificates",
                  # PMIx and Open MPI share one hwloc and one libevent (external PMIx requires it)
                  "libhwloc-dev", "libevent-dev")


def _cuda_stack(base: str, omit: tuple[str, ...], fmt: str) -> list[list]:
    devel_base, runtime_base = _cuda_bases(base, fmt)
    devel = [devel_base, comment("common stack, built from source")]
    devel.append(apt_get(ospackages=["python3", "python3-venv", "python3-dev", *BUILD_PACKAGES]))
    blocks = common_blocks(omit)
    devel += blocks
    site = _python_site()
    nccl = f"{site}/nvidia/nccl"
    venv_cmds = [
        f"python3 -m venv {stack.VENV}",
        f"sed 's/^tensorflow_cpu==/tensorflow==/' {stack.PREFIX}/src/requirements.txt "
        f"> /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps -r "
        f"{stack.PREFIX}/src/requirements-nodeps.txt",
        # Horovod's --no-build-isolation build needs these in the venv (pinned as the host's)
        f"{stack.VENV}/bin/pip install --no-cache-dir setuptools==84.2.1 wheel==0.48.0",
        # NCCL: torch's own nvidia-nccl-cu13 wheel (containers/sources.py); Horovod links it too
        f"ln -sf libnccl.so.2 {nccl}/lib/libnccl.so",
        # Horovod 0.28.1 with the project's patch and NCCL GPU operations
        f"PATH=/usr/local/openmpi/bin:$PATH HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED "
        f"HOROVOD_NCCL_HOME={nccl} CUDA_HOME=/usr/local/cuda "
        f"HOROVOD_BUILD_CUDA_CC_LIST={','.join(stack.CUDA_ARCHS)} "
        f"{stack.PREFIX}/src/horovod/build-wheel.sh {stack.VENV}/bin/python /tmp/horovod",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps /tmp/horovod/horovod-*/horovod-*.whl",
        "rm -rf /tmp/horovod /tmp/requirements-gpu.txt",
    ]
    devel += [copy(src=["requirements.txt", "requirements-nodeps.txt"], dest=f"{stack.PREFIX}/src/"),
              copy(src="containers/horovod", dest=f"{stack.PREFIX}/src/horovod"),
              shell(commands=venv_cmds)]

    runtime = [runtime_base, comment("common stack: what runs, copied from the devel stage"),
               apt_get(ospackages=list(RUNTIME_PACKAGES))]
    runtime += _runtime_copies(blocks)
    runtime += [copy(_from="devel", src=stack.VENV, dest=stack.VENV),
                shell(commands=[f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth"]),
                *_bundle_files()]
    return [devel, runtime]


def _runtime_copies(blocks: list) -> list:
    """What a runtime stage copies of the communication stack from the devel stage: each
    block's install tree, and rdma-core's provider list (/etc/libibverbs.d, what presets bind)."""
    return [*(block.runtime(_from="devel") for block in blocks),
            copy(_from="devel", src="/etc/libibverbs.d", dest="/etc/libibverbs.d")]


def common_blocks(omit: tuple[str, ...], *, cuda: bool = True) -> list:
    """The communication stack built from source; `cuda=False`: the same blocks and flags with
    CUDA (and gdrcopy) off, the cpu flavour's stack."""
    cuda_home = "/usr/local/cuda" if cuda else False
    gdr = cuda and "gdrcopy" not in omit
    psm2 = sources.source("libpsm2")
    libfabric = ["--enable-tcp", "--enable-shm", "--enable-rxm", "--enable-verbs=/usr/local/rdma-core",
                 "--enable-efa=/usr/local/rdma-core", "--enable-psm2=/usr/local/libpsm2", "--enable-psm3=no"]
    # CUDA (and gdrcopy) by dlopen: linked directly, libfabric.so needs the driver's libcuda.so.1,
    # so Open MPI's configure cannot link fi_getinfo against it (the stub is libcuda.so) and no
    # libfabric user would start on a node without a GPU driver
    libfabric += [f"--with-cuda={cuda_home}", "--enable-cuda-dlopen"] if cuda else ["--without-cuda"]
    if gdr:
        libfabric += ["--with-gdrcopy=/usr/local/gdrcopy", "--enable-gdrcopy-dlopen"]
    blocks = [
        # providers read /etc/libibverbs.d (the path the infiniband preset binds from the host)
        rdma_core(version=stack.RDMA_CORE.version, prefix="/usr/local/rdma-core",
                  cmake_opts=["-DCMAKE_INSTALL_SYSCONFDIR=/etc", "-DNO_MAN_PAGES=1"],
                  ospackages=["libudev-dev", "libnl-3-dev", "libnl-route-3-dev", "make", "pkg-config",
                              "wget"]),     # no pandoc/docutils: no man pages
    ]
    if gdr:
        blocks.append(gdrcopy(version=stack.GDRCOPY.version, prefix="/usr/local/gdrcopy"))
    blocks += [
        # libpsm2 in the common stack: Open MPI's psm2 MTL (omnipath preset) is built against it.
        # Without PSM_CUDA: a CUDA build needs the CUDA hfi1 driver headers (HFI1_CAP_GPUDIRECT_OT),
        # which neither kernel headers nor the source carry.
        generic_build(
            url=psm2.site_url, directory=f"opa-psm2-PSM2_{psm2.version}", prefix="/usr/local/libpsm2",
            build=["make -j$(nproc) WERROR="],   # gcc 12+ warnings (array-bounds) are errors otherwise
            # the Makefile installs headers under $DESTDIR/usr/include: give --with-psm2 its include/
            install=["make install DESTDIR=/usr/local/libpsm2 INSTALL_LIB_TARG=/lib WERROR=",
                     "ln -sfn usr/include /usr/local/libpsm2/include"],
            devel_environment={"LD_LIBRARY_PATH": "/usr/local/libpsm2/lib:$LD_LIBRARY_PATH"},
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/libpsm2/lib:$LD_LIBRARY_PATH"}),
        # --without-bfd: UCX 1.13's backtraces use binutils' PTR macro, gone from bfd.h since
        # binutils 2.40 (bookworm, Ubuntu 24.04): debug.c stops at "'PTR' undeclared"
        ucx(version=stack.UCX.version, prefix="/usr/local/ucx", cuda=cuda_home,
            gdrcopy="/usr/local/gdrcopy" if gdr else False, ofed="/usr/local/rdma-core",
            knem=False, xpmem=False, ospackages=["file", "libnuma-dev", "make", "wget"],
            configure_opts=["--enable-optimizations", "--disable-logging", "--disable-debug",
                            "--disable-assertions", "--disable-params-check", "--disable-doxygen-doc",
                            "--without-bfd"],
            # UCX 1.13's test programs (not installed) include test_cuda_hook.c, which calls the
            # pre-CUDA-13 cuCtxCreate(ctx, flags, dev): their folder is not built
            postconfigure=["printf 'all install check clean distclean:\\n\\t@true\\n' > test/apps/Makefile"]),
        _libfabric(libfabric),
        # Slurm >= 23.11's configure stops without munge; libpmi2 does not use it
        slurm_pmi2(version=SLURM_PMI2.version, prefix="/usr/local/slurm-pmi2",
                   configure_opts=["--without-munge"]),
        pmix(version=stack.PMIX.version, prefix="/usr/local/pmix",
             ospackages=["file", "libhwloc-dev", "libevent-dev", "make", "tar", "wget", "perl"]),
        _openmpi(cuda, ofi="/usr/local/libfabric"),
    ]
    return blocks


def _openmpi(cuda: bool, ofi: str):
    """The stack's Open MPI; `ofi`: the libfabric its ofi components link ("": the default paths)."""
    return openmpi(version=stack.OPENMPI.version, prefix="/usr/local/openmpi", cuda=cuda,
                   infiniband=False, ucx="/usr/local/ucx", pmix="/usr/local/pmix",
                   pmi="/usr/local/slurm-pmi2",
                   configure_opts=["--enable-mpi-cxx", "--enable-orterun-prefix-by-default",
                                   f"--with-ofi={ofi}" if ofi else "--with-ofi",
                                   "--with-psm2=/usr/local/libpsm2", "--with-slurm",
                                   "--with-libevent=/usr", "--with-hwloc=/usr"],
                   # libfabric 2.0 took container_of out of its public headers; Open MPI 4.1.4's
                   # ofi MTL still uses it (later 4.1.x define it themselves): define it the same way
                   postconfigure=[_define_container_of("ompi/mca/mtl/ofi/mtl_ofi_request.h")])


def _define_container_of(header: str) -> str:
    lines = ["#include <stddef.h>", "#ifndef container_of",
             "#define container_of(ptr, type, member) ((type *) ((char *) (ptr) - offsetof(type, member)))",
             "#endif"]
    quoted = " ".join(f"'{line}'" for line in lines)
    return f"printf '%s\\n' {quoted} | cat - {header} > {header}.new && mv {header}.new {header}"


def _libfabric(configure_opts: list[str]):
    env = {"PATH": "/usr/local/libfabric/bin:$PATH",
           "LD_LIBRARY_PATH": "/usr/local/libfabric/lib:$LD_LIBRARY_PATH"}
    return generic_autotools(url=sources.source("libfabric").site_url, prefix="/usr/local/libfabric",
                             configure_opts=configure_opts, devel_environment=env,
                             runtime_environment=env)


def _fabric_build(prof: FabricProfile, flavour: str, omit: tuple[str, ...]) -> tuple[list, list]:
    """What a fabric layer builds in its devel stage (FROM the stack's devel image) and what
    its runtime stage takes of it: (devel items, runtime items)."""
    devel: list = []
    runtime: list = []
    libfabric = ["--with-libfabric=/usr/local/libfabric"]
    if prof.binds_host_libfabric and flavour in SOURCE_STACKS:
        # The host's libfabric replaces the stack's 2.1 at run time, and the loader refuses a
        # library lacking a symbol version its users need: the stack's Open MPI, rebuilt with its
        # own block and flags against the oldest host ABI supported (HOST_ABI_PACKAGES); every
        # file of it that links libfabric replaces the stack's (those the rebuild lacks go),
        # and the distribution's fi_info replaces the stack's
        libfabric = []            # aws-ofi-nccl finds it on the default paths too
        devel += [apt_get(ospackages=list(HOST_ABI_PACKAGES)), shell(commands=["rm -rf /usr/local/openmpi"]),
                  _openmpi(flavour == "cuda", ofi=""),
                  shell(commands=[f"mkdir -p {HOST_ABI_STAGE}/usr/local/libfabric/bin",
                                  f"cp /usr/bin/fi_info {HOST_ABI_STAGE}/usr/local/libfabric/bin/",
                                  _libfabric_users(f"cp -a --parents {{}} {HOST_ABI_STAGE}/")])]
        runtime += [copy(_from="devel", src=HOST_ABI_STAGE, dest=HOST_ABI_STAGE),
                    shell(commands=[_libfabric_users("rm -f {}"),
                                    f"cp -a {HOST_ABI_STAGE}/. / && rm -rf {HOST_ABI_STAGE}"])]
    if "aws-ofi-nccl" in prof.source_builds and flavour == "cuda" and "aws-ofi-nccl" not in omit:
        plugin = generic_autotools(
            url=sources.source("aws-ofi-nccl").site_url, prefix="/usr/local/aws-ofi-nccl",
            configure_opts=[*libfabric, "--with-cuda=/usr/local/cuda", "--with-hwloc=/usr",
                            "--disable-tests", *prof.configure_flags.get("aws-ofi-nccl", ())],
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/aws-ofi-nccl/lib:$LD_LIBRARY_PATH"})
        devel.append(plugin)
        runtime.append(plugin.runtime(_from="devel"))
    return devel, runtime


def _libfabric_users(action: str) -> str:
    """A shell command running `action` ({} = the path, relative to /) on every file of the
    image's Open MPI that links libfabric."""
    path = '"$f"'
    return ("cd / && for f in $(find usr/local/openmpi -type f -name '*.so*'); do "
            f"if grep -qa 'libfabric[.]so[.]1' {path}; then {action.format(path)}; fi; done")


# fabric images: the stack image + the fabric layer -----------------------------
def _fabric_stages(prof: FabricProfile, flavour: str, omit: tuple[str, ...], fmt: str) -> list[list]:
    def start(image: str, tag: str, name: str):
        if fmt == "singularity":
            return baseimage(image=image, _bootstrap="localimage", _distro=stack.CUDA_DISTRO,
                             _docker_env=False, _as=name)
        return baseimage(image=tag, _distro=stack.CUDA_DISTRO, _as=name)
    built, taken = _fabric_build(prof, flavour, omit)
    stages = []
    if built:
        stages.append([start(STACK_DEVEL_IMAGE, f"{stack_tag(flavour)}-devel", "devel"),
                       comment(f"{FABRIC_BEGIN}: {prof.name} ({flavour}, build)"), *built,
                       comment(f"{FABRIC_END}: {prof.name}")])
    runtime = [start(STACK_IMAGE, stack_tag(flavour), "runtime"),
               comment(f"{FABRIC_BEGIN}: {prof.name} ({flavour})"), *taken]
    packages = prof.packages.get(flavour, ())
    if packages:
        runtime.append(apt_get(ospackages=list(packages)))
    if prof.library_path:        # bind targets for the host's libraries
        runtime.append(shell(commands=[f"mkdir -p {' '.join(prof.library_path)}"]))
    runtime.append(_fabric_environment(prof, flavour, omit))
    runtime.append(comment(f"{FABRIC_END}: {prof.name}"))
    # the image's own self-test (its %test below): the script as of this build, not the stack's
    runtime.append(copy(src="containers/image-test.sh", dest=IMAGE_TEST))
    stages.append(runtime)
    return stages


# shared pieces ------------------------------------------------------------
def _bundle_files() -> list:
    return [comment("the bundle: bench/ and the image self-test"),
            copy(src="bench", dest=f"{stack.BENCH_PARENT}/bench"),
            copy(src="containers/image-test.sh", dest=IMAGE_TEST)]


def _common_environment(flavour: str) -> environment:
    return environment(variables={
        "PATH": f"{stack.VENV}/bin:{stack.PREFIX}/bin:$PATH",
        # Lets mpirun run as root inside the image (CI runs as root); no effect otherwise.
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "FABRIC_BENCH_FLAVOUR": flavour})


def _fabric_environment(prof: FabricProfile, flavour: str, omit: tuple[str, ...]) -> environment:
    env = {"FABRIC_BENCH_FABRIC": prof.name}
    if prof.library_path:
        env["LD_LIBRARY_PATH"] = ":".join([*prof.library_path, "$LD_LIBRARY_PATH"])
    if "aws-ofi-nccl" in prof.source_builds and flavour == "cuda" and "aws-ofi-nccl" not in omit:
        env["NCCL_NET_PLUGIN"] = "ofi"     # libnccl-net-ofi.so in /usr/local/aws-ofi-nccl/lib
    return environment(variables=env)


def _to_text(stages: list[list], fabric: str, flavour: str, *, last_labels: bool = True,
             omit: tuple[str, ...] = (), base: str = "site") -> str:
    if fabric == "stack":
        stages[-1].append(_common_environment(flavour))
    if last_labels:
        stages[-1].append(label(metadata=labels(fabric, flavour, COMMIT_PLACEHOLDER, omit, base)))
    parts = []
    for items in stages:
        stage = hpccm.Stage()
        for item in items:
            stage += item
        parts.append(str(stage))
    what = "stack image" if fabric == "stack" else f"fabric={fabric}"
    header = (f"# fabric-bench image: {what} flavour={flavour} "
              f"(rendered by containers/recipe.py; do not edit)\n")
    return header + "\n\n".join(parts) + "\n"


def _setup(flavour: str, fabric: str) -> str:
    """cpu stack: the wheelhouse bind needs its mount point before %post runs."""
    if flavour not in stack.CPU_FLAVOURS or fabric != "stack":
        return ""
    return f"\n%setup\n    mkdir -p ${{APPTAINER_ROOTFS}}{stack.WHEELHOUSE}\n"


def _help(prof: FabricProfile | None, flavour: str, base: str) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in stack.versions(flavour, base).items() if k != "base")
    if prof is None:
        return (f"\n%help\n    fabric-bench {flavour} stack image: the common stack every fabric image of "
                f"this flavour is built FROM.\n    Stack: {versions}.\n    Self-test: apptainer test IMAGE\n")
    binds = ", ".join(b.host for b in prof.binds) or "none"
    return (f"\n%help\n    fabric-bench {flavour} image for the {prof.name} fabric: {prof.summary}.\n"
            f"    Stack: {versions}.\n"
            f"    Run a benchmark: apptainer exec IMAGE torchrun --standalone --nproc-per-node 2 "
            f"-m bench.torch_train --engine ddp --model resnet18\n"
            f"    or host-launched: mpirun -np 2 apptainer exec IMAGE python -m bench.torch_train "
            f"--engine horovod\n"
            f"    fabric-bench run --fabric {prof.name} sets the fabric's environment and binds "
            f"({binds}).\n"
            f"    Self-test: apptainer test IMAGE\n")


def preset_checks(prof: FabricProfile, flavour: str, omit: tuple[str, ...] = ()) -> list[str]:
    """image-test.sh arguments proving that every component the fabric's preset selects
    exists in the image: Open MPI components, libfabric providers, UCX transports, NCCL net."""
    envs = [prof.env, prof.nccl_env, *prof.gpudirect_env.values()]
    checks: list[str] = []

    def add(check: str) -> None:
        if check not in checks:
            checks.append(check)
    for env in envs:
        for var, kind in (("OMPI_MCA_pml", "pml"), ("OMPI_MCA_mtl", "mtl"), ("OMPI_MCA_btl", "btl"),
                          ("OMPI_MCA_osc", "osc")):
            value = env.get(var, "")
            if value.startswith("^"):          # "^openib,tcp" excludes both: nothing selected
                continue
            for name in value.split(","):
                if name:
                    add(f"ompi:{kind}:{name}")
        providers = [*env.get("FI_PROVIDER", "").split(","),
                     *env.get("OMPI_MCA_mtl_ofi_provider_include", "").split(",")]
        for name in providers:
            # cxi is the host's (Slingshot binds its libfabric): checked by preflight, not here
            if name and name != "cxi":
                add(f"fi:{name}")
        for name in env.get("UCX_TLS", "").split(","):
            if name and not (name == "gdr_copy" and "gdrcopy" in omit):
                if flavour != "cuda" and name.startswith(("cuda", "gdr")):
                    continue
                add(f"ucx:{name}")
        net = env.get("NCCL_NET", "")
        if net and flavour == "cuda" and not (net == "OFI" and "aws-ofi-nccl" in omit):
            add(f"nccl-net:{net}")
    return checks


def _test(prof: FabricProfile | None, flavour: str, omit: tuple[str, ...], base: str) -> str:
    return f"\n%test\n    {' '.join(self_test_argv(prof, flavour, omit, base))}\n"


def self_test_argv(prof: FabricProfile | None, flavour: str, omit: tuple[str, ...] = (),
                   base: str = "site") -> list[str]:
    """The image's self-test command (its %test; also `podman run IMG <this>`)."""
    versions = stack.versions(flavour, base)
    checks = [f"{name}={versions[name]}" for name in
              ("openmpi", "ucx", "libfabric", "python", "torch", "torchvision", "tensorflow",
               "horovod", "numpy", "mpi4py")]
    # cuda and cpu build the same communication stack: the same components checked (Debian's
    # Open MPI has them too; nothing of it is under /usr/local)
    stack_checks = ["ldd:/usr/local", "ldd-python:horovod", "ompi:pml:ucx", "ompi:mtl:ofi",
                    "ompi:pmix:ext3x", "ompi:mtl:psm2"]
    if flavour == "cuda":
        checks += [*stack_checks[:2], "ldd-python:nvidia/nccl", "ompi-cuda", *stack_checks[2:],
                   "ucx-cuda", "horovod-nccl", "torch-cuda"]
    else:
        checks += stack_checks[1:] if flavour == "cpu-debian" else stack_checks
    if prof is not None:
        tools = {"infiniband": ["ibv_devinfo"], "efa": ["ibv_devinfo"], "universal": ["ibv_devinfo"]
                 }.get(prof.name, [])
        if prof.binds_host_libfabric:        # every flavour: cpu-debian's is Debian's Open MPI
            tools.append(f"fi-abi:{HOST_ABI_NODE}")
        checks += tools + preset_checks(prof, flavour, omit)
    return [IMAGE_TEST, *dict.fromkeys(checks)]
