"""What a fabric profile is: the data one fabric hands to every part of the bundle.

A profile is frozen data, importable without hpccm (launch/ imports it). It says what the
fabric adds to an image (packages, source builds, configure flags, the self-test's tools),
what it hands to `launch/` at run time (the environment that selects it, the host paths and
device nodes it binds and needs), how a host shows that it has the fabric (`detect`, read by
the probe and `site init`), and what its traffic looks like (`sockets`, `verbs`: read by
preflight and the transport check). Values may name site settings as `{placeholders}` that
`environment()` and `bind_mounts()` fill in from the site configuration:

    {nic}             IP interface for bootstrap / TCP traffic (eth0, ib0, hsn0)
    {hca}             RDMA device(s): one (mlx5_0, hfi1_0, rdmap0s6) or a rail list (mlx5_0,mlx5_1)
    {hca_ports}       the same as device:port for UCX (mlx5_0:1,mlx5_1:1)
    {host_libfabric}  directory of the host's libfabric (Slingshot: the cxi provider)
    {host_libcxi}     the host's libcxi.so.1 (Slingshot)
    {NAME}            any other setting the profile declares in `site_keys` (SiteKey)

Facts, briefly: Open MPI 4.1 selects transports by pml (ob1 = BTLs such as
tcp/vader; ucx; cm = an MTL such as ofi or psm2); UCX by UCX_TLS (rc/ud/dc
verbs, sm, tcp, self, cuda_copy, cuda_ipc, gdr_copy) and UCX_NET_DEVICES;
libfabric by FI_PROVIDER (tcp, verbs, efa, psm2, opx, cxi); NCCL by NCCL_NET
("Socket", "IB", or a plugin's name: aws-ofi-nccl >= 1.12 answers to "OFI"),
NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Mapping, Optional

from containers import ompi_rules

_PLACEHOLDER = re.compile(r"{(\w+)}")

# From Linux 5.13 on, fork() copies the pages a process has pinned for DMA into the child
# (the kernel's copy-on-fork for RDMA: rdma-core's ibv_is_fork_initialized answers
# IBV_FORK_UNNEEDED there and ignores RDMAV_FORK_SAFE / IBV_FORK_SAFE), so a profile's
# fork_safe_env is set only on an older kernel.
FORK_SAFE_KERNEL = (5, 13)


def frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


def layer_packages(*packages: str, debian: tuple[str, ...] = ()) -> Mapping:
    """A fabric layer's apt packages: the same in cuda and cpu (they share the stack); cpu-debian
    adds `debian`, the providers Debian's packaged stack leaves out (rdma-core, libpsm2 there)."""
    return frozen({"cpu": packages, "cuda": packages, "cpu-debian": (*debian, *packages)})


@dataclass(frozen=True)
class Bind:
    """A host path bound into the container (`host` may hold a * glob or placeholders)."""

    host: str
    container: str = ""  # empty: the same path as on the host
    required: bool = True  # missing on the host -> launch refuses to start
    why: str = ""

    @property
    def target(self) -> str:
        return self.container or self.host


@dataclass(frozen=True)
class DeviceNode:
    """A device node a run over this fabric opens: preflight checks it on the host and in the
    container (a glob; `severity` when absent: fail or warn; `nccl_only`: needed only when NCCL
    carries the gradients)."""

    glob: str
    why: str
    severity: Literal["fail", "warn"] = "fail"
    nccl_only: bool = False


@dataclass(frozen=True)
class Detection:
    """How a host shows it has this fabric (launch.site.probe reads it; `site init` names the device):
      interface          an IP interface that is up
      rdma-port          an ACTIVE port under /sys/class/infiniband: of devices named `device_prefix`
                         (hfi1), or of devices no other profile claims by prefix, with `link_layer`
      libfabric-provider an RDM endpoint of libfabric `provider` (`fi_info -p`)
    `library`: a user-space library the fabric cannot run without (reported missing by the probe)."""

    kind: Literal["interface", "rdma-port", "libfabric-provider", "none"]
    link_layer: Optional[str] = None
    device_prefix: Optional[str] = None
    provider: Optional[str] = None
    library: Optional[str] = None


@dataclass(frozen=True)
class SiteKey:
    """A setting a fabric reads from its [fabrics.NAME] table besides the interface, device and host
    paths (RoCE's GID index, say). The site file checks each declared key by its `kind` (an int
    within `minimum`..`maximum`, or a str matching `pattern`) and refuses another value in one line
    saying `expected`; the presets fill `{name}` with it."""

    name: str
    expected: str  # what the complaint says the key holds ("a GID index, 0-255")
    kind: type = str  # int or str
    minimum: Optional[int] = None  # an int's bounds, inclusive
    maximum: Optional[int] = None
    pattern: str = r"[^\x00-\x1f\x7f]+"  # a str's whole shape (default: one line of text)

    def accepts(self, value: object) -> bool:
        if self.kind is int:
            return (
                isinstance(value, int)
                and not isinstance(value, bool)
                and (self.minimum is None or value >= self.minimum)
                and (self.maximum is None or value <= self.maximum)
            )
        return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None


@dataclass(frozen=True)
class NominalLink:
    """A link of this fabric the predictor may assume (`fabric-bench predict --nominal`,
    launch.predict.predict.NOMINAL): its line rate and a typical small-message latency, as
    vendors state them, NOT measured here."""

    name: str  # what the prediction calls it: "infiniband-hdr-200"
    latency_s: float
    rate_gbit_s: float


@dataclass(frozen=True)
class FabricProfile:
    name: str
    summary: str
    packages: Mapping[str, tuple[str, ...]] = field(default_factory=frozen)  # flavour -> apt packages
    source_builds: tuple[str, ...] = ()  # cuda flavour: stack.SourceBuild names
    configure_flags: Mapping[str, tuple[str, ...]] = field(default_factory=frozen)
    env: Mapping[str, str] = field(default_factory=frozen)  # MPI, UCX, libfabric, gloo
    nccl_env: Mapping[str, str] = field(default_factory=frozen)  # when NCCL does the allreduce
    gpudirect_env: Mapping[str, Mapping[str, str]] = field(default_factory=frozen)  # "on"/"off"
    # When the run hands GPU buffers to MPI (a CUDA-aware MPI: --allreduce mpi or --backend mpi on
    # GPUs), what lets this fabric's MPI path carry them, by the run's GPUDirect choice ("on", "off",
    # "default": not asked), set after gpudirect_env. Empty: this fabric's MPI path carries host buffers
    # only (preflight refuses MPI on GPU buffers over it, launch.site.preflight).
    mpi_gpu_env: Mapping[str, Mapping[str, str]] = field(default_factory=frozen)
    binds: tuple[Bind, ...] = ()
    gpudirect_binds: tuple[Bind, ...] = ()  # bound when GPUDirect is on
    # Directories put first on the image's LD_LIBRARY_PATH (baked into the image,
    # empty unless bound at run time: the host-library route of Slingshot).
    library_path: tuple[str, ...] = ()
    # The site file's keys under [fabrics.NAME]: the one naming the device (None: no device),
    # and the host paths the presets bind (placeholders of the same names).
    site_device_key: Optional[str] = None
    site_path_keys: tuple[str, ...] = ()
    # any further keys of its [fabrics.NAME] table, each with the value it must hold (SiteKey)
    site_keys: tuple[SiteKey, ...] = ()
    # Open MPI coll/tuned rules for this fabric (containers.ompi_rules), written per run
    ompi_coll_rules: tuple[ompi_rules.Rule, ...] = ()
    # The device nodes a run needs (preflight opens them on the host and looks in the container)
    device_nodes: tuple[DeviceNode, ...] = ()
    # Traffic: `verbs` = the fabric's libraries drive RDMA devices through libibverbs (preflight
    # checks the image's rdma-core providers against the host's drivers); `sockets` = gradients
    # over TCP sockets (gloo) are this fabric's own path, not a fallback (the transport check)
    verbs: bool = False
    sockets: bool = False
    # libpsm2 drives this fabric's hfi1 devices (preflight: the image must carry it)
    psm2: bool = False
    # the oldest libfabric the NCCL OFI plugin works with on this fabric (None: no floor known):
    # preflight (launch.site.preflight.nccl) fails a run whose image, or bound host library, is older
    nccl_plugin_min_libfabric: Optional[tuple[int, int]] = None
    # Variables that make the fabric's libraries safe across fork() with memory registered
    # (rdma-core's RDMAV_FORK_SAFE, a libfabric provider's own switch): needed only on a kernel
    # older than FORK_SAFE_KERNEL, so the preset sets them only there (launch.site.fabric_preset,
    # which records its decision). Never part of an image or its self-test: a run-time choice.
    fork_safe_env: Mapping[str, str] = field(default_factory=frozen)
    # tools the image's self-test runs (containers.recipe.self_test_argv) beside the preset checks
    self_test_tools: tuple[str, ...] = ()
    detect: Detection = Detection("none")
    # the nominal links the predictor offers for this fabric (NominalLink), in the order it lists them
    nominal: tuple[NominalLink, ...] = ()
    # The control image: every fabric's libraries, transports left to auto-selection. No host
    # "has" it; missing hardware reads as unknown rather than a failure.
    control: bool = False

    @property
    def binds_host_libfabric(self) -> bool:
        """The host's libfabric replaces the image's at run time (Slingshot's cxi)."""
        return "host_libfabric" in self.site_path_keys

    def needed_device_nodes(self, nccl: bool) -> list[DeviceNode]:
        return [node for node in self.device_nodes if nccl or not node.nccl_only]

    def placeholders(self) -> set[str]:
        """Site settings this profile needs (see the module docstring)."""
        texts = [
            *self.env.values(),
            *self.fork_safe_env.values(),
            *self.nccl_env.values(),
            *(v for env in self.gpudirect_env.values() for v in env.values()),
            *(v for env in self.mpi_gpu_env.values() for v in env.values()),
            *(b.host for b in (*self.binds, *self.gpudirect_binds)),
            *(b.container for b in (*self.binds, *self.gpudirect_binds)),
        ]
        # {hca_ports} is derived from {hca}: the site names only the devices
        return {"hca" if name == "hca_ports" else name for text in texts for name in _PLACEHOLDER.findall(text)}

    @property
    def mpi_carries_gpu_buffers(self) -> bool:
        """Whether this fabric's MPI path can carry GPU buffers (a CUDA-aware transport under it)."""
        return bool(self.mpi_gpu_env)

    def environment(
        self,
        site: Mapping[str, str],
        *,
        nccl: bool = True,
        gpudirect: Optional[bool] = None,
        mpi_gpu: bool = False,
        fork_safe: bool = False,
    ) -> dict[str, str]:
        """The environment selecting this fabric, placeholders filled from `site`; `mpi_gpu`: the
        run hands GPU buffers to MPI (mpi_gpu_env); `fork_safe`: the kernel needs fork_safe_env."""
        env = dict(self.env)
        if fork_safe:
            env |= self.fork_safe_env
        if nccl:
            env |= self.nccl_env
        if gpudirect is not None:
            env |= self.gpudirect_env.get("on" if gpudirect else "off", {})
        if mpi_gpu:
            env |= self.mpi_gpu_env.get("default" if gpudirect is None else "on" if gpudirect else "off", {})
        return {name: _fill(value, site, self.name) for name, value in env.items()}

    def bind_mounts(self, site: Mapping[str, str], gpudirect: Optional[bool] = None) -> list[Bind]:
        binds = (*self.binds, *(self.gpudirect_binds if gpudirect else ()))
        return [
            Bind(_fill(b.host, site, self.name), _fill(b.container, site, self.name), b.required, b.why) for b in binds
        ]


def hca_ports(hca: str) -> str:
    """'mlx5_0,mlx5_1' -> 'mlx5_0:1,mlx5_1:1' (UCX_NET_DEVICES wants device:port per rail)."""
    return ",".join(d if ":" in d else f"{d}:1" for d in (d.strip() for d in hca.split(",")) if d)


def _fill(text: str, site: Mapping[str, str], fabric: str) -> str:
    if "hca" in site and "hca_ports" not in site:
        site = {**site, "hca_ports": hca_ports(site["hca"])}

    def value(match: re.Match) -> str:
        if match.group(1) not in site:
            wanted = "hca" if match.group(1) == "hca_ports" else match.group(1)
            raise KeyError(f"fabric {fabric!r} needs the site setting {wanted!r}")
        return site[match.group(1)]

    return _PLACEHOLDER.sub(value, text)
