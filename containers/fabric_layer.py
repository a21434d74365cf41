"""A fabric image: the stack image plus the fabric layer (between FABRIC_BEGIN / FABRIC_END): the
profile's packages, what the layer builds (aws-ofi-nccl; Open MPI relinked for a host libfabric's
ABI), and its environment."""

from __future__ import annotations

from hpccm.building_blocks import apt_get, generic_autotools
from hpccm.primitives import baseimage, comment, copy, environment, shell

from containers import sources, stack
from containers.fabrics import FabricProfile
from containers.placeholders import STACK_DEVEL_IMAGE, STACK_IMAGE
from containers.stack_blocks import IMAGE_TEST, openmpi_block

FABRIC_BEGIN, FABRIC_END = ">>> fabric layer", "<<< fabric layer"
SOURCE_STACKS = ("cuda", "cpu")  # the flavours whose communication stack is built here
# A fabric whose host libfabric replaces the image's (Slingshot's cxi) gets the stack's libfabric
# users linked again against the oldest host ABI supported: the distribution's libfabric-dev
# (1.17.0 in Debian 12; ABI FABRIC_1.6, as every release from 1.14 to 1.19), where the stack's
# libfabric 2.1 makes them need FABRIC_1.8, which the 1.20-1.22 of SHS 12 hosts lack; its
# libfabric-bin brings an fi_info of that ABI (preflight and the probe run fi_info inside)
HOST_ABI_PACKAGES, HOST_ABI_NODE = ("libfabric-dev", "libfabric-bin"), "FABRIC_1.6"
HOST_ABI_STAGE = "/usr/local/openmpi-host-abi"  # the relinked libfabric users, devel -> runtime
# Where the NCCL OFI plugin's build says what it was built against (the self-test reports it)
PLUGIN_PREFIX = "/usr/local/aws-ofi-nccl"
PLUGIN_BUILT_AGAINST = f"{PLUGIN_PREFIX}/share/fabric-bench/built-against.txt"
# The Slingshot plugin's libfabric (stack.LIBFABRIC_SHS): headers and link ABI only, not in the image
LIBFABRIC_SHS_PREFIX = "/usr/local/libfabric-shs"


def stack_tag(flavour: str) -> str:
    """podman/docker name of the stack image (the Dockerfile of a fabric image is FROM it)."""
    return f"localhost/fabric-bench-stack:{flavour}"


def fabric_build(prof: FabricProfile, flavour: str, omit: tuple[str, ...]) -> tuple[list, list]:
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
        libfabric = []  # aws-ofi-nccl finds it on the default paths too
        devel += [
            apt_get(ospackages=list(HOST_ABI_PACKAGES)),
            shell(commands=["rm -rf /usr/local/openmpi"]),
            openmpi_block(flavour == "cuda", ofi=""),
            shell(
                commands=[
                    f"mkdir -p {HOST_ABI_STAGE}/usr/local/libfabric/bin",
                    f"cp /usr/bin/fi_info {HOST_ABI_STAGE}/usr/local/libfabric/bin/",
                    libfabric_users(f"cp -a --parents {{}} {HOST_ABI_STAGE}/"),
                ]
            ),
        ]
        runtime += [
            copy(_from="devel", src=HOST_ABI_STAGE, dest=HOST_ABI_STAGE),
            shell(commands=[libfabric_users("rm -f {}"), f"cp -a {HOST_ABI_STAGE}/. / && rm -rf {HOST_ABI_STAGE}"]),
        ]
    if "aws-ofi-nccl" in prof.source_builds and flavour == "cuda" and "aws-ofi-nccl" not in omit:
        if prof.binds_host_libfabric and "libfabric-shs" not in omit:
            # The plugin against libfabric 1.20 (headers and ABI of current Slingshot host software):
            # the distribution's 1.17 headers lack FI_OPT_CUDA_API_PERMITTED, and the plugin then
            # refuses every endpoint of an HMEM-capable provider (cxi) under the 1.18 API
            devel.append(libfabric_shs_block())
            libfabric = [f"--with-libfabric={LIBFABRIC_SHS_PREFIX}"]
        plugin = generic_autotools(
            url=sources.source("aws-ofi-nccl").site_url,
            prefix=PLUGIN_PREFIX,
            # hwloc from the distribution, on the default paths: --with-hwloc=/usr would add
            # `-isystem /usr/include`, which breaks libstdc++'s #include_next <stdlib.h>
            configure_opts=[
                *libfabric,
                "--with-cuda=/usr/local/cuda",
                "--disable-tests",
                *prof.configure_flags.get("aws-ofi-nccl", ()),
            ],
            postinstall=[plugin_built_against(libfabric)],
            runtime_environment={"LD_LIBRARY_PATH": "/usr/local/aws-ofi-nccl/lib:$LD_LIBRARY_PATH"},
        )
        devel.append(plugin)
        runtime.append(plugin.runtime(_from="devel"))
    return devel, runtime


def libfabric_shs_block():
    """libfabric 1.20 for the Slingshot plugin to compile and link against (no providers of note:
    the host's libfabric, bound in at run time, brings cxi)."""
    return generic_autotools(
        url=stack.LIBFABRIC_SHS.url,
        prefix=LIBFABRIC_SHS_PREFIX,
        configure_opts=["--without-cuda", "--disable-verbs", "--disable-efa", "--disable-psm3", "--disable-opx"],
    )


def plugin_built_against(libfabric: list[str]) -> str:
    """A postinstall command (in the plugin's prefix) writing which libfabric the plugin's
    configure found (version, prefix) and whether its headers declare FI_OPT_CUDA_API_PERMITTED."""
    prefix = libfabric[0].split("=", 1)[1] if libfabric else ""
    pkgconfig = f"PKG_CONFIG_PATH={prefix}/lib/pkgconfig " if prefix else ""
    source = f"/var/tmp/aws-ofi-nccl-{stack.AWS_OFI_NCCL.version}/include/config.h"
    return (
        f"mkdir -p {PLUGIN_BUILT_AGAINST.rsplit('/', 1)[0]} && "
        f'{{ echo "libfabric $({pkgconfig}pkg-config --modversion libfabric) {prefix or "(default paths)"}"; '
        f"grep -h 'define HAVE_DECL_FI_OPT_CUDA_API_PERMITTED' {source} || echo 'no HAVE_DECL_FI_OPT_CUDA_API_PERMITTED'; "
        f"}} > {PLUGIN_BUILT_AGAINST}"
    )


def libfabric_users(action: str) -> str:
    """A shell command running `action` ({} = the path, relative to /) on every file of the
    image's Open MPI that links libfabric."""
    path = '"$f"'
    return (
        "cd / && for f in $(find usr/local/openmpi -type f -name '*.so*'); do "
        f"if grep -qa 'libfabric[.]so[.]1' {path}; then {action.format(path)}; fi; done"
    )


# fabric images: the stack image + the fabric layer -----------------------------
def fabric_stages(prof: FabricProfile, flavour: str, omit: tuple[str, ...], fmt: str) -> list[list]:
    def start(image: str, tag: str, name: str):
        if fmt == "singularity":
            return baseimage(
                image=image, _bootstrap="localimage", _distro=stack.CUDA_DISTRO, _docker_env=False, _as=name
            )
        return baseimage(image=tag, _distro=stack.CUDA_DISTRO, _as=name)

    built, taken = fabric_build(prof, flavour, omit)
    stages = []
    if built:
        stages.append(
            [
                start(STACK_DEVEL_IMAGE, f"{stack_tag(flavour)}-devel", "devel"),
                comment(f"{FABRIC_BEGIN}: {prof.name} ({flavour}, build)"),
                *built,
                comment(f"{FABRIC_END}: {prof.name}"),
            ]
        )
    runtime = [
        start(STACK_IMAGE, stack_tag(flavour), "runtime"),
        comment(f"{FABRIC_BEGIN}: {prof.name} ({flavour})"),
        *taken,
    ]
    packages = prof.packages.get(flavour, ())
    if packages:
        runtime.append(apt_get(ospackages=list(packages)))
    if prof.library_path:  # bind targets for the host's libraries
        runtime.append(shell(commands=[f"mkdir -p {' '.join(prof.library_path)}"]))
    runtime.append(fabric_environment(prof, flavour, omit))
    runtime.append(comment(f"{FABRIC_END}: {prof.name}"))
    # the image's own self-test (its %test below): the script as of this build, not the stack's
    runtime.append(copy(src="containers/image-test.sh", dest=IMAGE_TEST))
    stages.append(runtime)
    return stages


def fabric_environment(prof: FabricProfile, flavour: str, omit: tuple[str, ...]) -> environment:
    env = {"FABRIC_BENCH_FABRIC": prof.name}
    if prof.library_path:
        env["LD_LIBRARY_PATH"] = ":".join([*prof.library_path, "$LD_LIBRARY_PATH"])
    if "aws-ofi-nccl" in prof.source_builds and flavour == "cuda" and "aws-ofi-nccl" not in omit:
        env["NCCL_NET_PLUGIN"] = "ofi"  # libnccl-net-ofi.so in /usr/local/aws-ofi-nccl/lib
    return environment(variables=env)
