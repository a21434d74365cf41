"""Tool text in, facts out: one pure function per tool (recorded outputs in tests/data/probe)."""

from __future__ import annotations

import re
from typing import Optional

from bench.placement import parse_ib_rate  # sysfs's rate text, which a run's NIC is read with too
from launch.site.probe.facts import (
    Gpu,
    GpuTopology,
    FiEndpoint,
    Mpi,
    RdmaPort,
    TopoGpu,
    UcxTransport,
)

NVIDIA_SMI_FIELDS = ("index", "name", "memory.total", "driver_version")


def parse_version(text: str) -> Optional[str]:
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
    return Mpi(flavour="mpich", version=match.group(1) if match else parse_version(text))


def parse_srun_mpi_list(text: str) -> list[str]:
    """`srun --mpi=list` -> plugin names (pmix, pmi2, none, ...)."""
    plugins = []
    for line in text.splitlines():
        if line.startswith(("\t", " ")) or line.startswith("srun: "):
            name = line.strip().removeprefix("srun: ").removeprefix("mpi/")
            if re.fullmatch(r"[\w.]+", name):
                plugins.append(name)
    return plugins
