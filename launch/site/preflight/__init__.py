"""Preflight: what must hold before a run starts, checked on this host and inside the image.

Two parts:
- the basics (`preflight`): the launcher and runtime binaries, the image and its
  fabric label, Horovod's build, the fabric's required host paths, the emulated
  cluster. A failure raises before anything starts. Those that follow from the spec
  and recorded facts alone (the image's labels: TensorFlow on GPUs, MPI on GPU
  buffers and the Horovod build that hands them to MPI; Horovod's build on the
  host) are one function, `decide`, which a sweep's plan asks too
  (launch.runs.dropped): what preflight would refuse is never planned.
- fabric truth (`fabric_checks`): what the image brings against what the host
  provides, for the run's fabric. One `sh` inside the container (the run's own
  runtime, binds and environment) reports the image's libfabric, UCX, Open MPI,
  NCCL and net plugin, rdma-core providers and the device nodes it can open; the
  host's side comes from the same tools and /sys, /dev. Each check has a verdict:
  ok | warn | fail (with the fix) | unknown (could not be checked here: never
  `ok`). A fail stops the run unless --force; every check goes into result.json
  under `preflight`.

What the checks look for, and why (the reports behind them):
- libfabric/UCX/Open MPI versions, host vs image; with host mpirun starting
  containers (the hybrid model) Open MPI must agree across them.
- the host's libfabric bound in (Slingshot): every symbol version the image's
  consumers (aws-ofi-nccl's libnccl-net, Open MPI's mtl ofi) need must be defined
  by the host's library: aws-ofi-nccl built against libfabric 1.18 and run on
  1.17 fails with "version `FABRIC_1.7' not found" (aws/aws-ofi-nccl#241,
  awslabs/awsome-distributed-ai#292); the host's libfabric replacing the image's
  (charliecloud#1449) is exactly this route.
- the host's RDMA drivers vs the image's rdma-core providers (libmlx5 for mlx5_core,
  libefa for efa, libhfi1verbs + libpsm2 for hfi1): without the provider verbs
  sees no device; and the image's libibverbs opening the host's devices (`ibv_devinfo
  -l` in the container): a provider for another kernel ABI than the host driver
  speaks drops the device although its file is there (k8snetworkplumbingwg/sriov-cni#348).
- aws-ofi-nccl on EFA needs libfabric >= 1.18 (aws/aws-ofi-nccl#333).
- GPUDirect RDMA asked for (--gpudirect on): nvidia_peermem loaded or DMA-BUF possible (the open
  GPU kernel modules on Linux 5.12+) on a host that carries the NVIDIA driver, else refused in one
  line (launch.site.preflight.gpudirect).
- device nodes: /dev/infiniband/uverbs* (and rdma_cm), /dev/hfi1_*, /dev/cxi*,
  /dev/nvidia*, /dev/gdrdrv (GPUDirect on), present on the host, openable, and
  present inside the container (a container without /dev/infiniband is
  NVIDIA/nccl-tests#1020's "no IB device").
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict
from pathlib import Path
import shutil  # noqa: F401  (tests patch preflight.shutil.which)

from containers.fabrics import PROFILES, FabricProfile
from containers.fabrics import profile as fabric_profile
from launch.fleet import emulate, sbatch_wait
from launch.errors import UsageError
from launch.kinds import trains
from launch.site.preflight.checks import VERDICT_ORDER, Check, worst  # noqa: F401  (the package's names)
from launch.site.preflight.devices import device_checks, device_patterns  # noqa: F401
from launch.site.preflight.facts import SideFacts, parse_side  # noqa: F401
from launch.site.preflight.fabric import fabric_checks  # noqa: F401
from launch.site.preflight.gpudirect import refusal as gpudirect_refusal
from launch.site.preflight.rdma import provider_checks, verbs_checks  # noqa: F401
from launch.site.preflight.versions import abi_checks, pmix_checks, version_checks  # noqa: F401

# ---------------------------------------------------------------- the basics


def horovod_built_for(framework: str) -> bool:
    """Whether this environment's Horovod has the framework's extension compiled in.

    Looks for the extension file instead of importing it: launch never imports
    torch or TensorFlow.
    """
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    folder = {"torch": "torch", "tf": "tensorflow"}[framework]
    return any((package / folder).glob("mpi_lib*.so"))


def check_image_fabric(spec, fabric: FabricProfile | None, labels: dict[str, str], required: bool) -> str:
    """The image's fabric label (`labels`: the runtime's reading of them) must match the
    fabric asked for (`fabric`: its profile, the run's preset's; universal serves any).
    `required`: an image without the label is refused (a .sif: ours carry it); else it passes
    as unknown (a directory image, say)."""
    from containers.recipe import LABEL_PREFIX

    built_for = labels.get(f"{LABEL_PREFIX}.fabric")
    wanted = fabric.name if spec.fabric and fabric else None  # emu-eth-1g is ethernet
    if wanted and built_for is None and required:
        raise UsageError(
            f"image {spec.image} has no readable {LABEL_PREFIX}.fabric label (not built by "
            f"`fabric-bench image build`?): cannot tell whether it serves fabric {spec.fabric!r}",
            fields=("image", "fabric"),
        )
    if (
        wanted
        and built_for is not None
        and built_for != wanted
        and not (built_for in PROFILES and PROFILES[built_for].control)
    ):
        raise UsageError(
            f"image {spec.image} was built for fabric {built_for!r}, not {spec.fabric!r}", fields=("image", "fabric")
        )
    return f"image built for fabric {built_for or 'unknown (no fabric-bench labels)'}"


def check_image_gpu_framework(spec, labels: dict[str, str]) -> None:
    """TensorFlow on GPUs in a cuda image: refused where it cannot work. An image without
    TensorFlow's CUDA 12 libraries (no `tensorflow-cuda` label: cuda images before them) would
    train on the CPU under a GPU result's name; TensorFlow + Horovod would mix Horovod's CUDA 13
    GPU operations with TensorFlow's CUDA 12 runtime in one process (containers/stack.py)."""
    from containers import stack
    from containers.recipe import LABEL_PREFIX

    if not (spec.framework == "tf" and spec.gpus_per_node > 0 and labels.get(f"{LABEL_PREFIX}.flavour") == "cuda"):
        return
    tf_cuda = labels.get(f"{LABEL_PREFIX}.version.tensorflow-cuda")
    if not tf_cuda:
        raise UsageError(
            f"image {spec.image}: its TensorFlow is built for CUDA {stack.TF_CUDA_MAJOR} and "
            f"the image carries no CUDA {stack.TF_CUDA_MAJOR} libraries (built before they were "
            f"added): it finds no GPU; rebuild the image, run TensorFlow on CPUs "
            f"(--gpus-per-node 0) or benchmark GPUs with --framework torch",
            fields=("framework", "image"),
        )
    if spec.engine == "horovod":
        raise UsageError(
            f"image {spec.image}: TensorFlow + Horovod on GPUs is not supported: Horovod's GPU "
            f"operations are built with CUDA {stack.CUDA_VERSION.split('.')[0]}, TensorFlow runs "
            f"CUDA {tf_cuda} (two CUDA runtimes in one process); use --engine native "
            f"(tf.distribute, TensorFlow's own NCCL) or --framework torch",
            fields=("framework", "engine", "image"),
        )


def mpi_on_gpus_refusal(spec, labels: dict[str, str] | None) -> str | None:
    """Why MPI on GPU buffers cannot run for this spec in an image with these labels (None: it can,
    or the spec moves no GPU buffers over MPI). The image must say its MPI is CUDA-aware
    (containers.stack.MPI_CUDA_LABEL), and Horovod must be its second build, with MPI GPU operations
    (containers.stack.HOROVOD_MPI_GPU_LABEL); where the image does not say, the line names the
    missing labels. `labels` None: a run on the host, where nothing says so."""
    from containers import stack
    from containers.recipe import LABEL_PREFIX

    if not spec.hands_gpu_buffers_to_mpi:
        return None
    training = trains(spec.benchmark)
    what = f"--allreduce mpi with {spec.engine} on GPUs" if training else f"{spec.benchmark} --backend mpi on GPUs"
    if training and spec.engine != "horovod":  # ddp: refused by RunSpec; native: tf.distribute's own choice
        return f"{what}: {spec.engine} never hands its gradients to MPI (it picks its own collective); use --engine horovod"
    instead = "use --allreduce nccl" if training else "use --backend torch (NCCL)"
    fabric = fabric_profile(spec.fabric) if spec.fabric else None
    if fabric is not None and not fabric.mpi_carries_gpu_buffers:
        selected = ", ".join(f"{k}={v}" for k, v in fabric.env.items() if k in ("OMPI_MCA_pml", "OMPI_MCA_mtl"))
        return (
            f"{what}: fabric {spec.fabric}'s MPI path ({selected}) carries host buffers only (its preset has no "
            f"CUDA-aware MPI transport, containers/fabrics/{fabric.name}.py); {instead}"
        )
    if labels is None:
        return (
            f"{what}: a run on the host, where no image label says the MPI is CUDA-aware; run it in a cuda "
            f"image labelled {LABEL_PREFIX}.{stack.MPI_CUDA_LABEL}, or {instead}"
        )
    version = {name: labels.get(f"{LABEL_PREFIX}.version.{name}", "?") for name in ("openmpi", "ucx")}
    needs = {
        stack.MPI_CUDA_LABEL: f"a CUDA-aware MPI (its Open MPI {version['openmpi']} over UCX {version['ucx']} is "
        "not labelled one)",
    }
    if training:
        needs[stack.HOROVOD_MPI_GPU_LABEL] = (
            "a Horovod built with HOROVOD_GPU_OPERATIONS=MPI (the image's own is built with NCCL GPU operations)"
        )
    missing = {name: why for name, why in needs.items() if not labels.get(f"{LABEL_PREFIX}.{name}")}
    if not missing:
        return None
    return (
        f"image {spec.image}: {what} needs {' and '.join(missing.values())}; no "
        f"{' or '.join(f'{LABEL_PREFIX}.{name}' for name in missing)} label; {instead}, or MPI on CPUs (--gpus-per-node 0)"
    )


def check_mpi_gpu_buffers(spec, labels: dict[str, str] | None) -> None:
    why = mpi_on_gpus_refusal(spec, labels)
    if why:
        raise UsageError(why, fields=("allreduce", "backend", "gpus_per_node", "image"))


def decide(spec, labels: dict[str, str] | None, horovod_frameworks: tuple[str, ...] | None = None) -> None:
    """Preflight's refusals that follow from the spec and recorded facts alone: the image's labels
    (a containerised run) and the frameworks this host's Horovod was built for (a run on the host;
    None: not checked). One function for run time (`preflight`, on the labels it read from the
    image) and for a sweep's plan (launch.runs.dropped, on the labels the image carries)."""
    if spec.containerised:
        check_image_gpu_framework(spec, labels or {})
        check_mpi_gpu_buffers(spec, labels or {})
        return
    check_mpi_gpu_buffers(spec, None)
    if spec.engine == "horovod" and horovod_frameworks is not None and spec.framework not in horovod_frameworks:
        raise UsageError(f"Horovod with {spec.framework} support is not installed here; run `make setup`")


def refusal(spec, labels: dict[str, str] | None, horovod_frameworks: tuple[str, ...] | None = None) -> str | None:
    """`decide`'s refusal as its line, or None where preflight accepts the spec."""
    try:
        decide(spec, labels, horovod_frameworks)
    except UsageError as exc:
        return str(exc)
    return None


def launching_tool(argv: list[str]) -> str:
    """The program a run's command needs on this host: sbatch for a batch run (its argv is
    Python waiting for the job, launch.fleet.sbatch_wait), else the command's own."""
    return sbatch_wait.submitter(argv) or argv[0]


def preflight(spec, prepared, force: bool = False, echo: bool = True) -> list[str]:
    """Checks before a real run; raises on the first failure of the basics, or on a
    failed fabric check unless `force`. Returns what it checked (one line each);
    the fabric checks are left in `prepared.fabric_checks` for the result."""
    checked = []
    tool = launching_tool(prepared.command.argv)
    if shutil.which(tool) is None:
        raise UsageError(f"{tool} not found: cannot start the ranks")
    checked.append(f"{tool} present")
    runtime = prepared.plan.runtime
    if runtime.containerised:
        if not runtime.available():
            raise UsageError(f"runtime {runtime.name}: {runtime.binary} not found on PATH", fields=("runtime",))
        image = runtime.image_to_run(prepared.plan.image)  # the spec's, parsed (launch.shapes.image)
        if runtime.image_is_file and not Path(image).is_file():
            raise UsageError(f"image {image} not found", fields=("image",))
        checked.append(f"image {image} present")
        prepared.image_labels = runtime.labels(image)  # read once: the result's image record reuses them
        checked.append(
            check_image_fabric(spec, prepared.preset.profile, prepared.image_labels, required=runtime.image_is_file)
        )
        decide(spec, prepared.image_labels)
    else:
        decide(spec, None, tuple(f for f in ("torch", "tf") if spec.engine == "horovod" and horovod_built_for(f)))
    gpudirect = gpudirect_refusal(spec.gpudirect, spec.gpus_per_node)
    if gpudirect:
        raise UsageError(gpudirect, fields=("gpudirect",))
    if prepared.preset.missing:
        raise UsageError(
            f"{f'fabric {spec.fabric}' if spec.fabric else 'the run'} needs {prepared.preset.missing[0]} "
            "(missing on this host)",
            fields=("fabric",),
        )
    if spec.fabric:
        checked.append(f"host paths of fabric {spec.fabric} present")
    if prepared.plan.emulated_cluster is not None:
        checked += emulate.preflight(prepared.plan.emulated_cluster)
    checks = fabric_checks(spec, prepared)
    prepared.fabric_checks = {"verdict": worst(checks), "forced": False, "checks": [asdict(c) for c in checks]}
    if echo:
        for c in checks:
            print(f"preflight: {c.line()}", flush=True)
    failed = [c for c in checks if c.verdict == "fail"]
    if failed and not force:
        raise UsageError(
            f"preflight failed ({len(failed)} of {len(checks)} checks; --force runs anyway): "
            + "; ".join(c.line() for c in failed)
        )
    prepared.fabric_checks["forced"] = bool(failed)
    return checked + [c.line() for c in checks]


def preflight_skipped(spec, prepared) -> list[str]:
    """What a dry run did not check (it needs nothing present on this host)."""
    skipped = [f"{launching_tool(prepared.command.argv)} present"]
    if spec.containerised:
        skipped += [
            f"{spec.runtime} present",
            f"image {spec.image} present and built for fabric {spec.fabric}",
            "host <-> image libraries (libfabric, UCX, Open MPI, NCCL, providers)",
        ]
    elif spec.engine == "horovod":
        skipped.append(f"Horovod built with {spec.framework}")
    if spec.fabric:
        skipped.append(f"host devices and libraries of fabric {spec.fabric}")
    if spec.hands_gpu_buffers_to_mpi:
        from containers import stack
        from containers.recipe import LABEL_PREFIX

        horovod = trains(spec.benchmark) and spec.engine == "horovod"
        skipped.append(
            f"image {spec.image} labelled {LABEL_PREFIX}.{stack.MPI_CUDA_LABEL} (a CUDA-aware MPI)"
            + (f" and {LABEL_PREFIX}.{stack.HOROVOD_MPI_GPU_LABEL} (Horovod's MPI build)" if horovod else "")
        )
    return skipped
