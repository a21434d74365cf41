"""One hpccm recipe: any (fabric, flavour) -> an Apptainer definition and a Dockerfile.

Layer order is the contract behind fair fabric comparisons: every image is
the common stack first (identical text for every fabric), then the fabric
layer, between `# >>> fabric layer` / `# <<< fabric layer` markers, then the
environment and labels (last, so Docker-style layer caches share everything
before them). `cuda` is two stages (a devel stage builds; the runtime stage
copies what runs); `cpu` is one stage whose Python stack installs from a
wheelhouse bound at /wheelhouse during the build (no wheels in the image).
"""
from __future__ import annotations

from dataclasses import dataclass

import hpccm
from hpccm.building_blocks import (apt_get, gdrcopy, generic_autotools, generic_build,
                                   nccl, openmpi, pmix, rdma_core, slurm_pmi2, ucx)
from hpccm.primitives import baseimage, comment, copy, environment, label, shell

from containers import stack
from containers.fabrics import FabricProfile, profile
from containers.files import bundle_commit, sha256_bytes

FABRIC_BEGIN, FABRIC_END = ">>> fabric layer", "<<< fabric layer"
LABEL_PREFIX = "org.fabric-bench"
HASH_PLACEHOLDER = "@RECIPE_HASH@"
COMMIT_PLACEHOLDER = "@BUNDLE_COMMIT@"
IMAGE_TEST = f"{stack.PREFIX}/bin/fabric-bench-image-test"
SLURM_PMI2 = stack.SourceBuild("slurm-pmi2", "24.11.5")   # Slurm's libpmi2 for Open MPI


@dataclass(frozen=True)
class Recipe:
    fabric: str
    flavour: str
    definition: str      # Apptainer .def
    dockerfile: str
    recipe_hash: str     # sha256 of the definition without this hash and the commit


def render(fabric: str, flavour: str, *, base: str = "", commit: str = "") -> Recipe:
    """Render (fabric, flavour). `base`: the cpu flavour's local base image
    (a .sif path for Apptainer; the Dockerfile always names stack.BASE_IMAGE_TAG)."""
    prof = profile(fabric)
    if flavour not in stack.FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; choose from {', '.join(stack.FLAVOURS)}")
    commit = commit or bundle_commit()
    texts = {}
    for fmt in ("singularity", "docker"):
        # hpccm renders some pieces (block.runtime()) when they are made: set the format first
        hpccm.config.set_container_format(fmt)
        hpccm.config.set_singularity_version("3.5")   # multi-stage: %files from <stage>
        try:
            stages = _cuda_stages(prof) if flavour == "cuda" else _cpu_stages(prof, base, fmt)
            texts[fmt] = _to_text(stages, prof, flavour, COMMIT_PLACEHOLDER)
        finally:
            hpccm.config.set_container_format("docker")
    definition = texts["singularity"] + _setup(flavour) + _help(prof, flavour) + _test(prof, flavour)
    # The hash names the content, not the commit it was rendered at (builds are cached by it).
    digest = sha256_bytes(definition.encode())

    def final(text: str) -> str:
        return text.replace(HASH_PLACEHOLDER, digest).replace(COMMIT_PLACEHOLDER, commit)
    return Recipe(fabric, flavour, final(definition), final(texts["docker"]), digest)


def labels(prof: FabricProfile, flavour: str, commit: str) -> dict[str, str]:
    out = {f"{LABEL_PREFIX}.fabric": prof.name, f"{LABEL_PREFIX}.flavour": flavour,
           f"{LABEL_PREFIX}.bundle-commit": commit, f"{LABEL_PREFIX}.recipe-hash": HASH_PLACEHOLDER}
    out |= {f"{LABEL_PREFIX}.version.{name}": version
            for name, version in stack.versions(flavour).items()}
    return out


# cpu: Debian bookworm base, Debian fabric packages, local wheels --------------
def _cpu_stages(prof: FabricProfile, base: str, fmt: str) -> list[list]:
    if fmt == "singularity":
        start = baseimage(image=base or "base.sif", _bootstrap="localimage",
                          _distro="ubuntu22", _docker_env=False, _as="runtime")
    else:
        start = baseimage(image=stack.BASE_IMAGE_TAG, _distro="ubuntu22", _as="runtime")
    site = f"{stack.VENV}/lib/python{stack.DEBIAN_PYTHON}/site-packages"
    common = [
        start,
        comment("common stack: Debian's Open MPI (UCX, libfabric, PMIx inside), Python venv"),
        apt_get(ospackages=["python3", "python3-venv", "openmpi-bin", "ucx-utils",
                            "libfabric-bin", "ca-certificates"]),
        comment(f"Python stack from the wheelhouse bound at {stack.WHEELHOUSE} (apptainer build "
                f"--bind DIR:{stack.WHEELHOUSE}; podman build -v DIR:{stack.WHEELHOUSE})"),
        shell(commands=[
            f"python3 -m venv {stack.VENV}",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --find-links {stack.WHEELHOUSE}"
            f" -r {stack.WHEELHOUSE}/requirements.txt",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps --find-links "
            f"{stack.WHEELHOUSE} -r {stack.WHEELHOUSE}/requirements-nodeps.txt",
            f"{stack.VENV}/bin/pip install --no-index --no-cache-dir --no-deps "
            f"{stack.WHEELHOUSE}/horovod-{stack.HOROVOD_VERSION}-*.whl",
            f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth",
        ]),
        *_bundle_files(),
    ]
    return [common + _fabric_layer(prof, "cpu", [], "")]


# cuda: CUDA devel stage builds the communication stack; runtime stage copies --
def _cuda_stages(prof: FabricProfile) -> list[list]:
    devel = [baseimage(image=stack.CUDA_DEVEL_IMAGE, _distro=stack.CUDA_DISTRO, _as="devel"),
             comment("common stack, built from source")]
    devel.append(apt_get(ospackages=["python3", "python3-venv", "python3-dev", "git", "wget",
                                     "bzip2", "make", "g++", "cmake", "patch", "pkg-config",
                                     "libnuma-dev", "ca-certificates"]))
    blocks = _cuda_common_blocks()
    devel += blocks
    venv_cmds = [
        f"python3 -m venv {stack.VENV}",
        f"sed 's/^tensorflow_cpu==/tensorflow==/' {stack.PREFIX}/src/requirements.txt "
        f"> /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps -r "
        f"{stack.PREFIX}/src/requirements-nodeps.txt",
        # Horovod 0.28.1 with the project's patch and NCCL GPU operations
        f"PATH=/usr/local/openmpi/bin:$PATH HOROVOD_GPU_OPERATIONS=NCCL "
        f"HOROVOD_NCCL_HOME=/usr/local/nccl CUDA_HOME=/usr/local/cuda "
        f"HOROVOD_BUILD_CUDA_CC_LIST={','.join(stack.CUDA_ARCHS)} "
        f"{stack.PREFIX}/src/horovod/build-wheel.sh {stack.VENV}/bin/python /tmp/horovod",
        f"{stack.VENV}/bin/pip install --no-cache-dir --no-deps /tmp/horovod/horovod-*/horovod-*.whl",
        "rm -rf /tmp/horovod /tmp/requirements-gpu.txt",
    ]
    devel += [copy(src=["requirements.txt", "requirements-nodeps.txt"], dest=f"{stack.PREFIX}/src/"),
              copy(src="containers/horovod", dest=f"{stack.PREFIX}/src/horovod"),
              shell(commands=venv_cmds)]
    fabric_blocks = _cuda_fabric_blocks(prof)
    devel += _fabric_layer(prof, "cuda", fabric_blocks, "build", runtime=False)

    site = f"{stack.VENV}/lib/python{stack.CUDA_PYTHON}/site-packages"
    runtime = [baseimage(image=stack.CUDA_RUNTIME_IMAGE, _distro=stack.CUDA_DISTRO, _as="runtime"),
               comment("common stack: what runs, copied from the devel stage"),
               apt_get(ospackages=["python3", "python3-venv", "libnuma1", "openssh-client",
                                   "ca-certificates"])]
    runtime += [block.runtime(_from="devel") for block in blocks]
    runtime += [copy(_from="devel", src=stack.VENV, dest=stack.VENV),
                shell(commands=[f"echo {stack.BENCH_PARENT} > {site}/fabric-bench.pth"]),
                *_bundle_files()]
    runtime += _fabric_layer(prof, "cuda", fabric_blocks, "runtime", runtime=True)
    return [devel, runtime]


def _cuda_common_blocks() -> list:
    cuda = "/usr/local/cuda"
    libfabric_common = ["--enable-tcp", "--enable-shm", "--enable-rxm", "--enable-verbs=/usr/local/rdma-core",
                        "--enable-efa=/usr/local/rdma-core", f"--with-cuda={cuda}",
                        "--with-gdrcopy=/usr/local/gdrcopy", "--enable-psm3=no"]
    return [
        rdma_core(version=stack.RDMA_CORE.version, prefix="/usr/local/rdma-core"),
        gdrcopy(version=stack.GDRCOPY.version, prefix="/usr/local/gdrcopy"),
        ucx(version=stack.UCX.version, prefix="/usr/local/ucx", cuda=cuda,
            gdrcopy="/usr/local/gdrcopy", ofed="/usr/local/rdma-core", knem=False, xpmem=False),
        _libfabric(libfabric_common),
        slurm_pmi2(version=SLURM_PMI2.version, prefix="/usr/local/slurm-pmi2"),
        pmix(version=stack.PMIX.version, prefix="/usr/local/pmix"),
        openmpi(version=stack.OPENMPI.version, prefix="/usr/local/openmpi", cuda=True,
                infiniband=False, ucx="/usr/local/ucx", pmix="/usr/local/pmix",
                pmi="/usr/local/slurm-pmi2",
                configure_opts=["--enable-mpi-cxx", "--enable-orterun-prefix-by-default",
                                "--with-ofi=/usr/local/libfabric", "--with-slurm",
                                "--with-libevent=internal", "--with-hwloc=internal"]),
        nccl(version=stack.NCCL.version, build=True, cuda=True, prefix="/usr/local/nccl",
             make_variables={"NVCC_GENCODE": " ".join(
                 f"-gencode=arch=compute_{a},code=sm_{a}" for a in stack.CUDA_ARCHS)}),
    ]


def _libfabric(configure_opts: list[str]):
    return generic_autotools(url=stack.LIBFABRIC.url, prefix="/usr/local/libfabric",
                             configure_opts=configure_opts,
                             devel_environment={"PATH": "/usr/local/libfabric/bin:$PATH",
                                                "LD_LIBRARY_PATH": "/usr/local/libfabric/lib:$LD_LIBRARY_PATH"},
                             runtime_environment={"PATH": "/usr/local/libfabric/bin:$PATH",
                                                  "LD_LIBRARY_PATH": "/usr/local/libfabric/lib:$LD_LIBRARY_PATH"})


def _cuda_fabric_blocks(prof: FabricProfile) -> list:
    flags = prof.configure_flags
    blocks = []
    if "libpsm2" in prof.source_builds:
        blocks.append(generic_build(
            url=stack.LIBPSM2.url, prefix="/usr/local/libpsm2",
            build=[f"make -j$(nproc) {' '.join(flags.get('libpsm2', ()))} "
                   "CUDA_PATH=/usr/local/cuda"],
            install=["make install DESTDIR=/usr/local/libpsm2 LIBDIR=/lib INSTALL_PREFIX=/"],
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/libpsm2/lib:$LD_LIBRARY_PATH"}))
    if "libfabric" in prof.source_builds:   # rebuilt over the common one, with this fabric's providers
        blocks.append(_libfabric(["--enable-tcp", "--enable-shm", "--enable-rxm",
                                  "--enable-verbs=/usr/local/rdma-core",
                                  "--enable-efa=/usr/local/rdma-core", "--with-cuda=/usr/local/cuda",
                                  "--with-gdrcopy=/usr/local/gdrcopy",
                                  *flags.get("libfabric", ())]))
    if "aws-ofi-nccl" in prof.source_builds:
        blocks.append(generic_autotools(
            url=stack.AWS_OFI_NCCL.url, prefix="/usr/local/aws-ofi-nccl",
            configure_opts=["--with-libfabric=/usr/local/libfabric", "--with-cuda=/usr/local/cuda",
                            "--disable-tests", *flags.get("aws-ofi-nccl", ())],
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/aws-ofi-nccl/lib:$LD_LIBRARY_PATH"}))
    return blocks


# shared pieces ------------------------------------------------------------
def _bundle_files() -> list:
    return [comment("the bundle: bench/ and the image self-test"),
            copy(src="bench", dest=f"{stack.BENCH_PARENT}/bench"),
            copy(src="containers/image-test.sh", dest=IMAGE_TEST)]


def _fabric_layer(prof: FabricProfile, flavour: str, blocks: list, stage: str,
                  runtime: bool = False) -> list:
    """The only part of an image that differs between fabrics."""
    layer = [comment(f"{FABRIC_BEGIN}: {prof.name} ({flavour}{', ' + stage if stage else ''})")]
    if runtime:
        layer += [block.runtime(_from="devel") for block in blocks]
    else:
        layer += blocks
    packages = prof.packages.get(flavour, ())
    if packages and (runtime or flavour == "cpu"):
        layer.append(apt_get(ospackages=list(packages)))
    if runtime or flavour == "cpu":
        if prof.library_path:        # bind targets for the host's libraries
            layer.append(shell(commands=[f"mkdir -p {' '.join(prof.library_path)}"]))
        layer.append(_fabric_environment(prof, flavour))
    layer.append(comment(f"{FABRIC_END}: {prof.name}"))
    return layer


def _common_environment(flavour: str) -> environment:
    return environment(variables={
        "PATH": f"{stack.VENV}/bin:{stack.PREFIX}/bin:$PATH",
        # Lets mpirun run as root inside the image (CI runs as root); no effect otherwise.
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "FABRIC_BENCH_FLAVOUR": flavour})


def _fabric_environment(prof: FabricProfile, flavour: str) -> environment:
    env = {"FABRIC_BENCH_FABRIC": prof.name}
    if prof.library_path:
        env["LD_LIBRARY_PATH"] = ":".join([*prof.library_path, "$LD_LIBRARY_PATH"])
    if "aws-ofi-nccl" in prof.source_builds and flavour == "cuda":
        env["NCCL_NET_PLUGIN"] = "ofi"     # libnccl-net-ofi.so in /usr/local/aws-ofi-nccl/lib
    return environment(variables=env)


def _to_text(stages: list[list], prof: FabricProfile, flavour: str, commit: str) -> str:
    layer_end = max(i for i, item in enumerate(stages[-1])
                    if isinstance(item, comment) and FABRIC_BEGIN in str(item))
    stages[-1].insert(layer_end, _common_environment(flavour))
    stages[-1].append(label(metadata=labels(prof, flavour, commit)))
    parts = []
    for number, items in enumerate(stages):
        stage = hpccm.Stage()
        for item in items:
            stage += item
        parts.append(str(stage))
    header = (f"# fabric-bench image: fabric={prof.name} flavour={flavour} "
              f"(rendered by containers/recipe.py; do not edit)\n")
    return header + "\n\n".join(parts) + "\n"


def _setup(flavour: str) -> str:
    """cpu: the wheelhouse bind needs its mount point before %post runs."""
    if flavour != "cpu":
        return ""
    return f"\n%setup\n    mkdir -p ${{APPTAINER_ROOTFS}}{stack.WHEELHOUSE}\n"


def _help(prof: FabricProfile, flavour: str) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in stack.versions(flavour).items() if k != "base")
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


def _test(prof: FabricProfile, flavour: str) -> str:
    versions = stack.versions(flavour)
    checks = [f"{name}={versions[name]}" for name in
              ("openmpi", "ucx", "libfabric", "python", "torch", "torchvision", "tensorflow",
               "horovod", "numpy", "mpi4py")]
    tools = {"infiniband": ["ibv_devinfo"], "omnipath": [], "efa": ["ibv_devinfo"]}.get(prof.name, [])
    if prof.name == "universal":
        tools = ["ibv_devinfo"]
    return f"\n%test\n    {IMAGE_TEST} {' '.join(checks + tools)}\n"
