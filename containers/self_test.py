"""An image's self-test (its %test; `podman run IMAGE <argv>`): the stack's versions and
components, and every component the fabric's preset selects, checked by containers/image-test.sh."""

from __future__ import annotations

from containers import stack
from containers.fabric_layer import HOST_ABI_NODE
from containers.fabrics import FabricProfile
from containers.stack_blocks import IMAGE_TEST


def preset_checks(prof: FabricProfile, flavour: str, omit: tuple[str, ...] = ()) -> list[str]:
    """image-test.sh arguments proving that every component the fabric's preset selects
    exists in the image: Open MPI components, libfabric providers, UCX transports, NCCL net."""
    envs = [prof.env, prof.nccl_env, *prof.gpudirect_env.values()]
    checks: list[str] = []

    def add(check: str) -> None:
        if check not in checks:
            checks.append(check)

    for env in envs:
        for var, kind in (
            ("OMPI_MCA_pml", "pml"),
            ("OMPI_MCA_mtl", "mtl"),
            ("OMPI_MCA_btl", "btl"),
            ("OMPI_MCA_osc", "osc"),
        ):
            value = env.get(var, "")
            if value.startswith("^"):  # "^openib,tcp" excludes both: nothing selected
                continue
            for name in value.split(","):
                if name:
                    add(f"ompi:{kind}:{name}")
        providers = [
            *env.get("FI_PROVIDER", "").split(","),
            *env.get("OMPI_MCA_mtl_ofi_provider_include", "").split(","),
        ]
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


def test_section(prof: FabricProfile | None, flavour: str, omit: tuple[str, ...], base: str) -> str:
    return f"\n%test\n    {' '.join(self_test_argv(prof, flavour, omit, base))}\n"


def self_test_argv(
    prof: FabricProfile | None, flavour: str, omit: tuple[str, ...] = (), base: str = "site"
) -> list[str]:
    """The image's self-test command (its %test; also `podman run IMG <this>`)."""
    versions = stack.versions(flavour, base)
    checks = [
        f"{name}={versions[name]}"
        for name in (
            "openmpi",
            "ucx",
            "libfabric",
            "python",
            "torch",
            "torchvision",
            "tensorflow",
            "horovod",
            "numpy",
            "mpi4py",
        )
    ]
    # cuda and cpu build the same communication stack: the same components checked (Debian's
    # Open MPI has them too; nothing of it is under /usr/local)
    stack_checks = [
        "ldd:/usr/local",
        "ldd-python:horovod",
        "ompi:pml:ucx",
        "ompi:mtl:ofi",
        "ompi:pmix:ext3x",
        "ompi:mtl:psm2",
    ]
    if flavour == "cuda":
        checks += [
            *stack_checks[:2],
            "ldd-python:nvidia/nccl",
            "ompi-cuda",
            *stack_checks[2:],
            "ucx-cuda",
            "horovod-nccl",
            "torch-cuda",
            "tf-cuda",
            *([] if "gdrcopy" in omit else ["gdrcopy"]),
            # issue 49: the CUDA-aware MPI, both Horovod builds, nccl-tests -- each check also
            # reports what the tools said (`image-test: report:` lines, the rehearsal record's)
            "ompi-report",
            "ucx-report",
            "ucx:cuda_copy",
            "ucx:cuda_ipc",
            *([] if "gdrcopy" in omit else ["ucx:gdr_copy"]),
            "horovod-gpu-ops:nccl",
            f"horovod-gpu-ops:mpi:{stack.HOROVOD_MPI_GPU_DIR}",
            *([] if "nccl-tests" in omit else [f"nccl-tests:{stack.NCCL_TESTS_PREFIX}"]),
        ]
    else:
        checks += stack_checks[1:] if flavour == "cpu-debian" else stack_checks
    if prof is not None:
        tools = list(prof.self_test_tools)
        if prof.binds_host_libfabric:  # every flavour: cpu-debian's is Debian's Open MPI
            tools.append(f"fi-abi:{HOST_ABI_NODE}")
        tools += plugin_checks(prof, flavour, omit)
        checks += tools + preset_checks(prof, flavour, omit)
    return [IMAGE_TEST, *dict.fromkeys(checks)]


def plugin_checks(prof: FabricProfile, flavour: str, omit: tuple[str, ...]) -> list[str]:
    """The NCCL OFI plugin's build: the libfabric it was built against (reported), whose headers
    must declare FI_OPT_CUDA_API_PERMITTED (EFA: the stack's libfabric; Slingshot: stack.LIBFABRIC_SHS,
    unless a rehearsal omits it and the plugin falls back to the distribution's 1.17), and on
    Slingshot no libfabric symbol version above what 1.20-1.22 hosts provide."""
    if "aws-ofi-nccl" not in prof.source_builds or flavour != "cuda" or "aws-ofi-nccl" in omit:
        return []
    if not prof.binds_host_libfabric:
        return ["aws-ofi-nccl-build:hmem"]
    if "libfabric-shs" in omit:
        return ["aws-ofi-nccl-build"]
    return ["aws-ofi-nccl-build:hmem", f"fi-abi-plugin:{stack.LIBFABRIC_SHS_ABI}"]
