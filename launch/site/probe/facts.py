"""The probe's typed facts: what a host offers (HostFacts and its parts) and a fabric's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launch.site import gids


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: Optional[int]
    driver: Optional[str]


@dataclass
class TopoGpu:
    """One GPU row of `nvidia-smi topo -m`."""

    index: int
    cpu_affinity: Optional[str]  # "0-47,96-143" as printed; None where not printed
    numa_affinity: Optional[int]  # None: not printed, or N/A
    links: dict[str, str] = field(default_factory=dict)  # other GPU / NIC column -> X, NV8, PIX, PXB, PHB, NODE, SYS


@dataclass
class GpuTopology:
    """`nvidia-smi topo -m`: GPU rows, and the NIC columns with their device names."""

    gpus: list[TopoGpu] = field(default_factory=list)
    nics: dict[str, Optional[str]] = field(default_factory=dict)  # NIC0 -> mlx5_0 (NIC Legend); None if not given

    def nic_links(self, gpu: int) -> dict[str, str]:
        """NIC column -> link type from the GPU with this index."""
        row = next(g for g in self.gpus if g.index == gpu)
        return {nic: row.links[nic] for nic in self.nics if nic in row.links}

    def nearest_nics(self, gpu: int) -> list[str]:
        """The NIC columns closest to a GPU (PIX before PXB, PHB, NODE, SYS), in column order."""
        links = self.nic_links(gpu)
        ranked = {nic: TOPO_DISTANCE.get(link, len(TOPO_DISTANCE)) for nic, link in links.items()}
        best = min(ranked.values(), default=None)
        return [nic for nic, rank in ranked.items() if rank == best]


# nvidia-smi topo -m link types, nearest first (SOC is what old drivers called SYS)
TOPO_DISTANCE = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


@dataclass
class Nic:
    name: str
    operstate: str  # up | down | unknown | ...
    mtu: Optional[int]
    speed_mbps: Optional[int]  # None when the kernel does not know (virtual NICs, -1)
    driver: Optional[str]


@dataclass
class RdmaPort:
    device: str  # mlx5_0, hfi1_0, efa_0, ...
    port: int
    state: str  # ACTIVE | DOWN | INIT | ...
    link_layer: Optional[str]  # InfiniBand | Ethernet
    rate_gbps: Optional[float]
    source: str  # sysfs | ibstat | ibv_devinfo


@dataclass
class FiEndpoint:
    provider: str
    fabric: Optional[str] = None
    domain: Optional[str] = None
    type: Optional[str] = None
    protocol: Optional[str] = None


@dataclass
class UcxTransport:
    transport: str
    device: str


@dataclass
class Mpi:
    flavour: Optional[str] = None  # openmpi | mpich
    version: Optional[str] = None
    components: dict[str, list[str]] = field(default_factory=dict)  # framework -> components


@dataclass
class HostFacts:
    cpu_count: Optional[int] = None
    cpu_model: Optional[str] = None
    gpus: list[Gpu] = field(default_factory=list)
    gpu_topology: Optional[GpuTopology] = None  # nvidia-smi topo -m
    nics: list[Nic] = field(default_factory=list)
    rdma_ports: list[RdmaPort] = field(default_factory=list)
    roce_gids: list[gids.Gid] = field(default_factory=list)  # GID tables of Ethernet RDMA ports
    infiniband_dev_nodes: list[str] = field(default_factory=list)  # /dev/infiniband/*
    hfi_dev_nodes: list[str] = field(default_factory=list)  # /dev/hfi1*
    libpsm2: Optional[bool] = None
    libfabric_providers: list[str] = field(default_factory=list)
    provider_endpoints: dict[str, list[FiEndpoint]] = field(default_factory=dict)  # fi_info -p, per provider
    ucx_transports: list[UcxTransport] = field(default_factory=list)
    mpi: Mpi = field(default_factory=Mpi)
    slurm_version: Optional[str] = None
    slurm_mpi_plugins: list[str] = field(default_factory=list)
    runtimes: dict[str, Optional[str]] = field(default_factory=dict)  # name -> version (None: absent)
    numa: dict[int, str] = field(default_factory=dict)  # NUMA node -> its CPU list (sysfs)
    device_numa: dict[str, Optional[int]] = field(default_factory=dict)  # NIC / RDMA device -> NUMA node
    tools: dict[str, str] = field(default_factory=dict)  # command name -> ok | absent | why it failed


@dataclass
class Verdict:
    fabric: str
    usable: bool
    reason: str
