"""Host probe: what this machine offers for each fabric, as typed facts and verdicts.

Three layers, each testable on its own:
- parsers: pure functions, tool text in, facts out (`parse_ibv_devinfo`, ...);
- `collect(run, root)`: runs the tools in COMMANDS through `run` and reads
  /sys, /proc and /dev under `root`; a missing tool is the status "absent",
  never an exception;
- `verdicts(facts)`: per fabric, usable or not and why.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from containers.fabrics import HOST_FABRICS, FabricProfile, profile
from launch.ranks.runtimes import CONTAINER_RUNTIMES, RUNTIMES
from launch.site import gids

# libfabric providers the fabric profiles detect a fabric by (fi_info -p PROVIDER)
DETECTED_PROVIDERS = tuple(
    dict.fromkeys(
        p.detect.provider
        for p in map(profile, HOST_FABRICS)
        if p.detect.kind == "libfabric-provider" and p.detect.provider
    )
)


# Every external command the probe runs, by name (recorded outputs use these names).
NVIDIA_SMI_FIELDS = ("index", "name", "memory.total", "driver_version")
COMMANDS: dict[str, list[str]] = {
    "nvidia_smi": ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
    "nvidia_smi_topo": ["nvidia-smi", "topo", "-m"],
    "ibv_devinfo": ["ibv_devinfo"],
    "ibstat": ["ibstat"],
    "show_gids": ["show_gids"],  # NVIDIA's GID table script (sysfs is read too)
    "fi_info_list": ["fi_info", "-l"],
    **{f"fi_info_{provider}": ["fi_info", "-p", provider] for provider in DETECTED_PROVIDERS},
    "ucx_info": ["ucx_info", "-d"],
    "ompi_info": ["ompi_info", "--parsable"],
    "mpichversion": ["mpichversion"],
    "sinfo_version": ["sinfo", "--version"],
    "srun_mpi_list": ["srun", "--mpi=list"],
    **{name: argv for name in CONTAINER_RUNTIMES if (argv := RUNTIMES[name]().version_argv())},
}


# ---------------------------------------------------------------- facts


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


# ---------------------------------------------------------------- parsers


def _version(text: str) -> Optional[str]:
    match = re.search(r"\d+(?:\.\d+)+", text)
    return match.group(0) if match else None


def parse_cpuinfo(text: str) -> tuple[int, Optional[str]]:
    """/proc/cpuinfo -> (logical CPUs, model name)."""
    count = len(re.findall(r"^processor\s*:", text, re.M))
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return count, model.group(1).strip() if model else None


def parse_nvidia_smi(text: str, fields=NVIDIA_SMI_FIELDS) -> list[Gpu]:
    """`nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits` -> GPUs."""
    gpus = []
    for position, line in enumerate(l for l in text.splitlines() if l.strip()):
        row = dict(zip(fields, (cell.strip() for cell in line.split(","))))
        memory = re.match(r"\d+", row.get("memory.total", ""))
        gpus.append(
            Gpu(
                index=int(row.get("index", position)),
                name=row.get("name", "?"),
                memory_mib=int(memory.group(0)) if memory else None,
                driver=row.get("driver_version"),
            )
        )
    return gpus


_TOPO_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_cpu_list(text: str) -> list[int]:
    """`0-47,96-143` (a topo -m CPU Affinity, a cpuset) -> [0, 1, ..., 47, 96, ..., 143]."""
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def parse_nvidia_smi_topo(text: str) -> Optional[GpuTopology]:
    """`nvidia-smi topo -m` -> GPU rows (CPU and NUMA affinity, link to every other GPU
    and NIC) and the NIC columns; None when no matrix is found.

    Handles both layouts seen in the wild: columns aligned by spaces (a header
    whose names hold single spaces, "CPU Affinity") and by tabs (recent drivers,
    with empty alignment cells); NIC columns named NIC<n> with a `NIC Legend`,
    or by device (mlx5_0) on older drivers.
    """
    lines = text.splitlines()
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(r"\s*GPU0\b", line) and not re.match(r"GPU0\s+X\b", line.strip())
        ),
        None,
    )
    if start is None:
        return None
    columns = [c.strip() for c in re.split(r"\t+| {2,}", lines[start].strip()) if c.strip()]
    devices = [c for c in columns if c not in _TOPO_AFFINITY]
    topology = GpuTopology(
        nics={c: (c if not re.fullmatch(r"NIC\d+", c) else None) for c in devices if not re.fullmatch(r"GPU\d+", c)}
    )
    for line in lines[start + 1 :]:
        cells = line.split()
        if not cells or cells[0] == "Legend:":
            break
        if not re.fullmatch(r"GPU\d+", cells[0]):
            continue  # NIC rows repeat what the GPU rows say
        row = dict(zip(columns, cells[1:]))
        numa = row.get("NUMA Affinity", "")
        topology.gpus.append(
            TopoGpu(
                index=int(cells[0][3:]),
                cpu_affinity=row.get("CPU Affinity"),
                numa_affinity=int(numa) if numa.isdigit() else None,
                links={c: row[c] for c in devices if c in row and c != cells[0]},
            )
        )
    for line in lines[start:]:
        if legend := re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line):
            if legend.group(1) in topology.nics:
                topology.nics[legend.group(1)] = legend.group(2)
    return topology


def parse_ib_state(text: str) -> str:
    """sysfs `4: ACTIVE`, ibv_devinfo `PORT_ACTIVE (4)`, ibstat `Active` -> `ACTIVE`."""
    word = re.sub(r"^\d+:\s*|\s*\(\d+\)$", "", text.strip())
    return word.removeprefix("PORT_").upper()


def parse_ib_rate(text: str) -> Optional[float]:
    """sysfs `100 Gb/sec (4X EDR)` or ibstat `100` -> 100.0 (Gb/s)."""
    match = re.match(r"\s*(\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def parse_ibv_devinfo(text: str) -> list[RdmaPort]:
    """`ibv_devinfo [-v]` -> one RdmaPort per port (rate from -v's active_width x active_speed)."""
    ports, device, port = [], None, None
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            device = value
        elif key == "port" and device:
            port = RdmaPort(device, int(value), "UNKNOWN", None, None, "ibv_devinfo")
            ports.append(port)
        elif port is None:
            continue
        elif key == "state":
            port.state = parse_ib_state(value)
        elif key == "link_layer":
            port.link_layer = value
        elif key == "active_width":
            width = re.match(r"\d+", value)
            port.rate_gbps = float(width.group(0)) if width else None
        elif key == "active_speed" and port.rate_gbps:
            port.rate_gbps *= parse_ib_rate(value) or 0.0
    return ports


def parse_ibstat(text: str) -> list[RdmaPort]:
    """`ibstat` -> one RdmaPort per port."""
    ports, device, port = [], None, None
    for line in text.splitlines():
        if ca := re.match(r"CA '([^']+)'", line):
            device, port = ca.group(1), None
        elif (number := re.match(r"\s+Port (\d+):", line)) and device:
            port = RdmaPort(device, int(number.group(1)), "UNKNOWN", None, None, "ibstat")
            ports.append(port)
        elif port is not None:
            key, _, value = line.strip().partition(": ")
            if key == "State":
                port.state = parse_ib_state(value)
            elif key == "Rate":
                port.rate_gbps = parse_ib_rate(value)
            elif key == "Link layer":
                port.link_layer = value.strip()
    return ports


def parse_fi_info_list(text: str) -> list[str]:
    """`fi_info -l` -> provider names (`tcp`, `ofi_rxm`, ...)."""
    return [line[:-1] for line in text.splitlines() if re.fullmatch(r"[\w;]+:", line)]


def parse_fi_info(text: str) -> list[FiEndpoint]:
    """`fi_info [-p PROV]` (short form) -> one FiEndpoint per `provider:` block."""
    endpoints: list[FiEndpoint] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == "provider":
            endpoints.append(FiEndpoint(value.strip()))
        elif endpoints and key in ("fabric", "domain", "type", "protocol"):
            setattr(endpoints[-1], key, value.strip())
    return endpoints


def parse_ucx_info(text: str) -> list[UcxTransport]:
    """`ucx_info -d` -> (transport, device) pairs."""
    found, transport = [], None
    for line in text.splitlines():
        if match := re.match(r"#\s+Transport:\s*(\S+)", line):
            transport = match.group(1)
        elif (match := re.match(r"#\s+Device:\s*(\S+)", line)) and transport:
            found.append(UcxTransport(transport, match.group(1)))
            transport = None
    return found


def parse_ompi_info(text: str) -> Mpi:
    """`ompi_info --parsable` -> Open MPI version and its components per framework."""
    mpi = Mpi(flavour="openmpi")
    for line in text.splitlines():
        parts = line.split(":")
        if parts[:3] == ["ompi", "version", "full"]:
            mpi.version = parts[3]
        elif parts[0] == "mca" and len(parts) > 3 and parts[3] == "version":
            names = mpi.components.setdefault(parts[1], [])
            if parts[2] not in names:
                names.append(parts[2])
    return mpi


def parse_mpichversion(text: str) -> Mpi:
    match = re.search(r"MPICH Version:\s*(\S+)", text)
    return Mpi(flavour="mpich", version=match.group(1) if match else _version(text))


def parse_srun_mpi_list(text: str) -> list[str]:
    """`srun --mpi=list` -> plugin names (pmix, pmi2, none, ...)."""
    plugins = []
    for line in text.splitlines():
        if line.startswith(("\t", " ")) or line.startswith("srun: "):
            name = line.strip().removeprefix("srun: ").removeprefix("mpi/")
            if re.fullmatch(r"[\w.]+", name):
                plugins.append(name)
    return plugins


# ---------------------------------------------------------------- collection


@dataclass
class ToolOutput:
    status: str  # ok | absent | exit N: <last stderr line> | timeout after Ns
    stdout: str = ""


Runner = Callable[[str, list[str]], ToolOutput]


def run_tool(name: str, argv: list[str], timeout_s: float = 15.0) -> ToolOutput:
    """Run one tool; never raises: a missing tool is `absent`, a failure is its status."""
    if shutil.which(argv[0]) is None:
        return ToolOutput("absent")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ToolOutput(f"timeout after {timeout_s:g}s")
    except OSError as exc:
        return ToolOutput(f"error: {exc.strerror or exc}")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1]
        return ToolOutput(f"exit {proc.returncode}: {last[:200]}", proc.stdout)
    return ToolOutput("ok", proc.stdout)


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:  # absent, or the kernel refuses (speed of a virtual NIC)
        return None


def _int(text: Optional[str]) -> Optional[int]:
    return int(text) if text and re.fullmatch(r"-?\d+", text) else None


def read_nics(root: Path) -> list[Nic]:
    """/sys/class/net/* under root -> NICs."""
    nics = []
    for path in sorted((root / "sys/class/net").glob("*")):
        uevent = _read(path / "device/uevent") or ""
        driver = re.search(r"^DRIVER=(.+)$", uevent, re.M)
        speed = _int(_read(path / "speed"))
        nics.append(
            Nic(
                name=path.name,
                operstate=_read(path / "operstate") or "unknown",
                mtu=_int(_read(path / "mtu")),
                speed_mbps=speed if speed and speed > 0 else None,
                driver=driver.group(1) if driver else None,
            )
        )
    return nics


def read_sysfs_rdma(root: Path) -> list[RdmaPort]:
    """/sys/class/infiniband/*/ports/* under root -> RDMA ports."""
    ports = []
    for port in sorted((root / "sys/class/infiniband").glob("*/ports/*")):
        ports.append(
            RdmaPort(
                device=port.parent.parent.name,
                port=int(port.name),
                state=parse_ib_state(_read(port / "state") or "UNKNOWN"),
                link_layer=_read(port / "link_layer"),
                rate_gbps=parse_ib_rate(_read(port / "rate") or ""),
                source="sysfs",
            )
        )
    return ports


def merge_ports(*sources: list[RdmaPort]) -> list[RdmaPort]:
    """One entry per (device, port): the first source wins; a missing rate is filled from later ones."""
    merged: dict[tuple[str, int], RdmaPort] = {}
    for ports in sources:
        for port in ports:
            kept = merged.setdefault((port.device, port.port), port)
            if kept.rate_gbps is None:
                kept.rate_gbps = port.rate_gbps
    return list(merged.values())


PSM2_DIRS = ("usr/lib64", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/local/lib")


def collect(run: Runner = run_tool, root: Path = Path("/")) -> HostFacts:
    """Probe the host (or a recorded one: `run` answering from files, `root` a copied tree)."""
    facts = HostFacts()
    out: dict[str, ToolOutput] = {}
    for name, argv in COMMANDS.items():
        out[name] = run(name, argv)
        facts.tools[name] = out[name].status

    def text(name: str) -> str:
        return out[name].stdout if out[name].status == "ok" else ""

    cpuinfo = _read(root / "proc/cpuinfo")
    if cpuinfo:
        facts.cpu_count, facts.cpu_model = parse_cpuinfo(cpuinfo)
    facts.gpus = parse_nvidia_smi(text("nvidia_smi"))
    facts.gpu_topology = parse_nvidia_smi_topo(text("nvidia_smi_topo"))
    facts.nics = read_nics(root)
    facts.rdma_ports = merge_ports(
        read_sysfs_rdma(root), parse_ibstat(text("ibstat")), parse_ibv_devinfo(text("ibv_devinfo"))
    )
    facts.roce_gids = merge_gids(
        [g for p in facts.rdma_ports if p.link_layer == "Ethernet" for g in gids.read_sysfs(root, p.device, p.port)],
        gids.parse_show_gids(text("show_gids")),
    )
    facts.infiniband_dev_nodes = sorted(p.name for p in (root / "dev/infiniband").glob("*"))
    facts.hfi_dev_nodes = sorted(p.name for p in (root / "dev").glob("hfi1*"))
    if root == Path("/") or any((root / d).is_dir() for d in PSM2_DIRS):
        facts.libpsm2 = any(any((root / d).glob("libpsm2.so*")) for d in PSM2_DIRS)
    facts.libfabric_providers = parse_fi_info_list(text("fi_info_list"))
    facts.provider_endpoints = {
        provider: [e for e in parse_fi_info(text(f"fi_info_{provider}")) if e.provider == provider]
        for provider in DETECTED_PROVIDERS
    }
    facts.ucx_transports = parse_ucx_info(text("ucx_info"))
    if text("ompi_info"):
        facts.mpi = parse_ompi_info(text("ompi_info"))
    elif text("mpichversion"):
        facts.mpi = parse_mpichversion(text("mpichversion"))
    facts.slurm_version = _version(text("sinfo_version")) if text("sinfo_version") else None
    facts.slurm_mpi_plugins = parse_srun_mpi_list(text("srun_mpi_list"))
    for runtime in CONTAINER_RUNTIMES:
        facts.runtimes[runtime] = _version(text(runtime)) if text(runtime) else None
    facts.numa, facts.device_numa = read_topology(root)
    return facts


def read_topology(root: Path) -> tuple[dict[int, str], dict[str, Optional[int]]]:
    """NUMA nodes with their CPUs, and the NUMA node of every NIC and RDMA device (None: not reported,
    e.g. a virtual NIC or a VM's PCI bus)."""
    from bench.placement import numa_node_of, cpu_list_text, numa_nodes

    numa = {node: cpu_list_text(cpus) for node, cpus in numa_nodes(root).items()}
    devices: dict[str, Optional[int]] = {}
    for cls in ("net", "infiniband"):
        for dev in sorted((root / "sys/class" / cls).glob("*")):
            devices[dev.name] = numa_node_of(dev / "device") if (dev / "device").exists() else None
    return numa, devices


# ---------------------------------------------------------------- verdicts


def _port_text(port: RdmaPort) -> str:
    rate = f", {port.rate_gbps:g} Gb/s" if port.rate_gbps else ""
    return f"{port.device} port {port.port} {port.state} ({port.link_layer or '?'}{rate})"


def verdict_interface(facts: HostFacts, fabric: FabricProfile) -> Verdict:
    up = [n for n in facts.nics if n.name != "lo" and n.operstate == "up"]
    if not up:
        return Verdict(fabric.name, False, "no network interface other than lo is up")
    described = ", ".join(
        f"{n.name} ({n.driver or 'driver ?'}, "
        f"{f'{n.speed_mbps} Mb/s' if n.speed_mbps else 'speed unknown'}, mtu {n.mtu})"
        for n in up
    )
    return Verdict(fabric.name, True, f"up: {described}")


def merge_gids(*sources: list[gids.Gid]) -> list[gids.Gid]:
    """One entry per (device, port, index): the first source wins."""
    merged: dict[tuple[str, int, int], gids.Gid] = {}
    for found in sources:
        for gid in found:
            merged.setdefault((gid.device, gid.port, gid.index), gid)
    return list(merged.values())


def fabric_ports(facts: HostFacts, fabric: FabricProfile) -> list[RdmaPort]:
    """The RDMA ports that are this fabric's: of devices named by its prefix (hfi1), else of
    devices no other profile claims by prefix."""
    prefix = fabric.detect.device_prefix
    if prefix:
        return [p for p in facts.rdma_ports if p.device.startswith(prefix)]
    claimed = tuple(d for d in (profile(n).detect.device_prefix for n in HOST_FABRICS) if d)
    return [p for p in facts.rdma_ports if not (claimed and p.device.startswith(claimed))]


def active_ports(facts: HostFacts, fabric: FabricProfile) -> list[RdmaPort]:
    layer = fabric.detect.link_layer
    return [p for p in fabric_ports(facts, fabric) if p.state == "ACTIVE" and (layer is None or p.link_layer == layer)]


_LIBRARY_FOUND = {"libpsm2": lambda facts: facts.libpsm2}  # libraries a profile's detection may name


def verdict_rdma_port(facts: HostFacts, fabric: FabricProfile) -> Verdict:
    detect, name = fabric.detect, fabric.name
    ports, active = fabric_ports(facts, fabric), active_ports(facts, fabric)
    if detect.device_prefix:
        if not active:
            provider = (detect.library or "").removeprefix("lib")
            hint = (
                f" ({provider} in fi_info alone does not mean an HFI)"
                if provider and provider in facts.libfabric_providers
                else ""
            )
            return Verdict(name, False, f"no {detect.device_prefix} device with an ACTIVE port{hint}")
    elif not active:
        layer = detect.link_layer or "RDMA"
        if not ports:
            return Verdict(
                name, False, f"no /sys/class/infiniband device with an ACTIVE {layer} port (no RDMA device found)"
            )
        other = [p for p in ports if p.state == "ACTIVE"]
        if other:
            kinds = sorted({"RoCE (Ethernet)" if p.link_layer == "Ethernet" else (p.link_layer or "?") for p in other})
            return Verdict(
                name,
                False,
                f"no ACTIVE {layer} port; {', '.join(kinds)} only: " + "; ".join(_port_text(p) for p in other),
            )
        return Verdict(name, False, f"no ACTIVE {layer} port: " + "; ".join(_port_text(p) for p in ports))
    found = _LIBRARY_FOUND.get(detect.library or "", lambda facts: None)(facts)
    if found is False:
        return Verdict(name, False, f"{_port_text(active[0])} but {detect.library} not found")
    ports_text = "; ".join(_port_text(p) for p in active)
    table = [g for g in facts.roce_gids if any((g.device, g.port) == (p.device, p.port) for p in active)]
    if table:  # an Ethernet port's GID table is known: RoCE v2 needs a v2 entry
        v2 = [g for g in table if g.type == gids.V2]
        if not v2:
            return Verdict(name, False, f"{ports_text}; RoCE v1 GIDs only (no RoCE v2 entry)")
        return Verdict(
            name, True, f"{ports_text}; RoCE v2 GIDs: " + ", ".join(f"{g.device}:{g.port} {g.text()}" for g in v2)
        )
    return Verdict(name, True, ports_text)


def verdict_libfabric_provider(facts: HostFacts, fabric: FabricProfile) -> Verdict:
    provider = fabric.detect.provider or ""
    rdm = [e for e in facts.provider_endpoints.get(provider, []) if e.type in (None, "FI_EP_RDM")]
    if rdm:
        domains = ", ".join(sorted({e.domain or "?" for e in rdm}))
        return Verdict(fabric.name, True, f"libfabric {provider} provider, RDM domain(s): {domains}")
    status = facts.tools.get(f"fi_info_{provider}", "absent")
    if status == "absent":
        return Verdict(fabric.name, False, "fi_info not installed")
    detail = "" if status == "ok" else f" ({status})"
    return Verdict(fabric.name, False, f"`fi_info -p {provider}` found no {provider} endpoint{detail}")


# how a profile's detection kind is judged (containers.fabrics.profile.Detection)
DETECTORS: dict[str, Callable[[HostFacts, FabricProfile], Verdict]] = {
    "interface": verdict_interface,
    "rdma-port": verdict_rdma_port,
    "libfabric-provider": verdict_libfabric_provider,
}


def verdicts(facts: HostFacts) -> dict[str, Verdict]:
    return {name: DETECTORS[profile(name).detect.kind](facts, profile(name)) for name in HOST_FABRICS}


def probe_report(facts: HostFacts) -> dict:
    """Facts and verdicts as JSON-ready data (`fabric-bench probe --json`)."""
    return {
        "schema_version": 2,
        "facts": dataclasses.asdict(facts),
        "verdicts": {name: dataclasses.asdict(v) for name, v in verdicts(facts).items()},
    }
