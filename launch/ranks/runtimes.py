"""Container runtimes: each turns (image, binds, env, gpus, argv) into its own argv.

The registry of runtimes: a runtime's name, flags, version command, how it
inspects and digests an image, and whether its images are files live only in
its class; `host` runs without a container. Other modules import the names
(RUNTIMES, CONTAINER_RUNTIMES) instead of spelling them.

The image reaching a runtime's argv is a shape (launch.shapes.ImageRef) and the runtime is
chosen by one (launch.shapes.RuntimeName): a raw str at either is a type error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from launch import shapes
from launch.errors import UsageError
from launch.shapes import ImageRef, RuntimeName


@dataclass(frozen=True)
class Bind:
    source: str
    target: str
    readonly: bool = False

    def spec(self, ro_suffix: str = ":ro") -> str:
        return f"{self.source}:{self.target}" + (ro_suffix if self.readonly else "")


class Runtime:
    name = "abstract"
    binary: str | None = None
    image_is_file = False  # images are files (.sif) the host can check for
    binds_any_target = True  # a bind may name a target path the image lacks (the runtime makes it)

    def __init__(self, shared: tuple[str, ...] | None = None):
        """`shared`: those of HOST_NAMESPACES the run's containers share with the host
        (`host_namespaces()` says which a run needs); None: the runtime's own default. Only
        runtimes that isolate them (podman) read it."""
        self.shared = shared

    @property
    def containerised(self) -> bool:
        return self.binary is not None

    def version_argv(self) -> list[str] | None:
        """How the probe asks this runtime for its version (None: nothing to ask)."""
        return [self.binary, "--version"] if self.binary else None

    def inspect_argv(self, image: ImageRef) -> list[str] | None:
        """How the archive records an image's metadata (None: this runtime cannot)."""
        return None

    def wrap(
        self, image: ImageRef | None, binds: list[Bind], env: dict[str, str], gpus: bool, argv: list[str]
    ) -> list[str]:
        raise NotImplementedError

    def image_to_run(self, image: ImageRef | None) -> ImageRef:
        """The image a container runtime's wrap runs (RunSpec refuses such a run without one)."""
        if image is None:
            raise UsageError(f"--runtime {self.name} needs --image", fields=("runtime", "image"))
        return image

    def available(self) -> bool:
        return self.binary is None or shutil.which(self.binary) is not None

    def digest(self, image: ImageRef) -> str | None:
        """sha256 of the image as this runtime identifies it (None if unknown)."""
        return None

    def identities(self, image: ImageRef) -> set[str]:
        """Every sha256 this runtime knows the image by, as sha256:HEX (its digest; podman's image
        id too, which its builds record): what the image store is searched for (launch.runs.images)."""
        found = self.digest(image)
        return {normal_digest(found)} if found else set()

    def labels(self, image: ImageRef) -> dict[str, str]:
        """The image's fabric-bench labels (fabric, flavour, stack digest, recipe hash, ...);
        {} where this runtime cannot read them or the image has none."""
        return {}


class HostRuntime(Runtime):
    """No container: ranks run in this host's environment (env goes through the launcher)."""

    name = "host"

    def wrap(
        self, image: ImageRef | None, binds: list[Bind], env: dict[str, str], gpus: bool, argv: list[str]
    ) -> list[str]:
        return list(argv)


def normal_digest(digest: str) -> str:
    """sha256:HEX for a bare HEX or a prefixed one."""
    digest = digest.strip()
    return digest if digest.startswith("sha256:") else f"sha256:{digest}"


def inspected(argv: list[str], pick: Callable[[Any], Any]) -> Any:
    """`pick` of the JSON an inspect command prints; None where the command or the lookup fails."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        return pick(json.loads(out.stdout))
    except (OSError, subprocess.SubprocessError, ValueError, LookupError, TypeError, AttributeError):
        return None


def ours(labels: dict) -> dict[str, str]:
    """The fabric-bench labels among an image's labels (containers.recipe.LABEL_PREFIX)."""
    from containers.recipe import LABEL_PREFIX

    return {k: v for k, v in labels.items() if k.startswith(LABEL_PREFIX + ".")}


def file_sha256(path: str) -> str | None:
    """sha256 of an image file, remembered across runs (containers.digest)."""
    from containers.build import cache_dir
    from containers.digest import remembered_sha256

    try:
        return "sha256:" + remembered_sha256(path, cache_dir())
    except OSError:
        return None


# The host's Python and preloads, which site modules set and a runtime that passes the host's
# environment carries into the image: its python3 would import the host's packages (PYTHONPATH),
# run another prefix (PYTHONHOME) or load a host library into every rank (LD_PRELOAD). Cleared in
# the image unless the run sets them itself (extra_env); launch.runs.run records which were set.
HOST_LEAKS = ("LD_PRELOAD", "PYTHONHOME", "PYTHONPATH")


def host_leaks_set(environ: Mapping[str, str] | None = None) -> list[str]:
    """Which of HOST_LEAKS the launching environment holds (what a container run clears)."""
    import os

    where: Mapping[str, str] = os.environ if environ is None else environ
    return [name for name in HOST_LEAKS if name in where]


def env_command(env: dict[str, str]) -> list[str]:
    """`env -u LEAK ... NAME=VALUE ... ` run inside the image, in front of the program: the host's
    Python and preloads (HOST_LEAKS) are cleared, then each value reaches the program whole, after
    everything the image's own start-up sets. Apptainer's `--env` is a key=value map that splits a
    value holding two `=` at its commas (NCCL_IB_HCA==mlx5_0,mlx5_1 fails to start), and older
    Singularity cut any value at its first comma (UCX_TLS=rc,sm). Not `--cleanenv`: the MPI
    launcher's own variables (OMPI_*, PMIX_*, SLURM_*) must pass."""
    unset = [arg for name in HOST_LEAKS if name not in env for arg in ("-u", name)]
    return ["env", *unset, *(f"{name}={value}" for name, value in sorted(env.items()))]


class ApptainerRuntime(Runtime):
    """`apptainer exec`: the host environment passes through (MPI's variables must);
    the fabric's variables are set by `env` inside the image (env_command), so they win there."""

    name = "apptainer"
    binary: str = "apptainer"
    image_is_file = True

    def wrap(
        self, image: ImageRef | None, binds: list[Bind], env: dict[str, str], gpus: bool, argv: list[str]
    ) -> list[str]:
        out = [self.binary, "exec", "--pwd", "/"]  # not $PWD: a checkout there would shadow the image's bench/
        if gpus:
            out.append("--nv")
        for bind in binds:
            out += ["--bind", bind.spec()]
        return out + [self.image_to_run(image), *env_command(env), *argv]

    def digest(self, image: ImageRef) -> str | None:
        return file_sha256(image)

    def inspect_argv(self, image: ImageRef) -> list[str]:
        return [self.binary, "inspect", "--json", "--all", image]

    def labels(self, image: ImageRef) -> dict[str, str]:
        return ours(
            inspected(
                [self.binary, "inspect", "--json", "--labels", image], lambda out: out["data"]["attributes"]["labels"]
            )
            or {}
        )


class SingularityRuntime(ApptainerRuntime):
    name = "singularity"
    binary = "singularity"


# The namespaces a container may share with the host, and what needs each (`host_namespaces`)
HOST_NAMESPACES = {
    "network": "the fabric's interfaces and devices by the host's names; ranks in separate containers "
    "and the launcher's daemons meeting at the host's addresses",
    "ipc": "ranks of one node in separate containers sharing memory (/dev/shm: Open MPI's vader, UCX sm, NCCL SHM)",
    "pid": "ranks of one node in separate containers copying between processes (CMA: vader, UCX cma, NCCL P2P)",
}


def host_namespaces(fabric: str | None, container_per_rank: bool, ranks_per_node: int) -> tuple[str, ...]:
    """The host namespaces a run's containers need (HOST_NAMESPACES): the network where a fabric's
    preset names the host's interfaces or devices, or each rank has a container of its own; IPC and
    PIDs only where ranks of one node sit in separate containers. One container holding every rank
    (the local launcher's starter inside the image) shares neither."""
    shared = ["network"] if fabric or container_per_rank else []
    if container_per_rank and ranks_per_node > 1:
        shared += ["ipc", "pid"]
    return tuple(shared)


class PodmanRuntime(Runtime):
    """`podman run` sharing the host's namespaces the run needs (`host_namespaces`; all three,
    network, IPC and PIDs, where the caller does not say: MPI and RDMA across containers need them).
    Of the host's environment it passes what launchers, fabrics and engines set (the
    prefixes below, as podman's `--env PREFIX*`): all of it (`--env-host`) would replace
    the image's PATH with the host's, and the ranks would run the host's python3."""

    name = "podman"
    binary: str = "podman"
    HOST_ENV = (
        "OMPI_*",
        "OPAL_*",
        "PMIX_*",
        "PMI_*",
        "SLURM_*",
        "HOROVOD_*",
        "FABRIC_BENCH_*",
        "NCCL_*",
        "UCX_*",
        "FI_*",
        "CUDA_*",
        "NVIDIA_*",
        "OMP_*",
        "GLOO_*",
        "MASTER_*",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
    )

    def wrap(
        self, image: ImageRef | None, binds: list[Bind], env: dict[str, str], gpus: bool, argv: list[str]
    ) -> list[str]:
        from containers.build import PODMAN_ULIMITS

        shared = tuple(HOST_NAMESPACES) if self.shared is None else self.shared
        out = [self.binary, "run", "--rm", *(f"--{name}=host" for name in HOST_NAMESPACES if name in shared)]
        out += ["--workdir", "/"]
        for name in self.HOST_ENV:
            out += ["--env", name]
        for limit in PODMAN_ULIMITS:
            out += ["--ulimit", limit]
        if gpus:
            out += ["--device", "nvidia.com/gpu=all"]
        for bind in binds:
            out += ["--volume", bind.spec()]
        for name, value in sorted(env.items()):
            out += ["--env", f"{name}={value}"]
        return out + [self.image_to_run(image), *argv]

    def inspect_argv(self, image: ImageRef) -> list[str]:
        return [self.binary, "image", "inspect", image]

    def labels(self, image: ImageRef) -> dict[str, str]:
        return ours(inspected(self.inspect_argv(image), lambda out: out[0].get("Labels")) or {})

    def digest(self, image: ImageRef) -> str | None:
        try:
            out = subprocess.run(self.inspect_argv(image), capture_output=True, text=True, check=True)
            return json.loads(out.stdout)[0]["Digest"]
        except (OSError, subprocess.CalledProcessError, ValueError, LookupError):
            return None

    def identities(self, image: ImageRef) -> set[str]:
        """Its manifest digest and its image id (what `podman build` gives and the image store records)."""
        found = inspected(self.inspect_argv(image), lambda out: [out[0].get("Digest"), out[0].get("Id")])
        return {normal_digest(d) for d in found or () if isinstance(d, str) and d}


class CharliecloudRuntime(Runtime):
    """`ch-run`: an unpacked image directory or squashfs; bind targets must exist in the image."""

    name = "charliecloud"
    binary: str = "ch-run"
    binds_any_target = False

    def wrap(
        self, image: ImageRef | None, binds: list[Bind], env: dict[str, str], gpus: bool, argv: list[str]
    ) -> list[str]:
        out = [self.binary, "--cd", "/"]
        out += [f"--unset-env={name}" for name in HOST_LEAKS if name not in env]  # ch-run passes the host's env
        for bind in binds:
            out += ["--bind", f"{bind.source}:{bind.target}"]  # ch-run binds are read-write only
        for name, value in sorted(env.items()):
            out.append(f"--set-env={name}={value}")
        return out + [self.image_to_run(image), "--", *argv]


RUNTIMES = {
    cls.name: cls for cls in (HostRuntime, ApptainerRuntime, SingularityRuntime, PodmanRuntime, CharliecloudRuntime)
}
HOST = HostRuntime.name
CONTAINER_RUNTIMES = tuple(name for name, cls in RUNTIMES.items() if cls.binary)  # in order of preference


def runtime_name(field: str, value: object) -> RuntimeName:
    """A runtime's name, parsed against this registry (launch.shapes.runtime_name)."""
    return shapes.runtime_name(field, value, tuple(RUNTIMES))


def runtime_named(name: RuntimeName, shared: tuple[str, ...] | None = None) -> Runtime:
    """The runtime called `name`; `shared`: the host namespaces its containers share (host_namespaces)."""
    try:
        return RUNTIMES[name](shared)
    except KeyError:
        raise UsageError(f"unknown runtime {name!r}; choose from {', '.join(RUNTIMES)}") from None
