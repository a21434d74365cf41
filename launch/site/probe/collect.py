"""Collecting a host's facts: every tool the probe runs (COMMANDS, by the names recorded
outputs use), run through `run` (a missing tool is the status "absent", never an exception),
and /sys, /proc and /dev read under `root` (a copied tree in tests)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from containers.fabrics import HOST_FABRICS, profile
from launch.ranks.runtimes import CONTAINER_RUNTIMES, RUNTIMES
from launch.site import gids
from launch.site.probe.facts import HostFacts, Nic, RdmaPort
from launch.site.probe.parsers import (
    NVIDIA_SMI_FIELDS,
    parse_version,
    parse_cpuinfo,
    parse_fi_info,
    parse_fi_info_list,
    parse_ib_rate,
    parse_ib_state,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_mpichversion,
    parse_nvidia_smi,
    parse_nvidia_smi_topo,
    parse_ompi_info,
    parse_srun_mpi_list,
    parse_ucx_info,
)

# libfabric providers the fabric profiles detect a fabric by (fi_info -p PROVIDER)
DETECTED_PROVIDERS = tuple(
    dict.fromkeys(
        p.detect.provider
        for p in map(profile, HOST_FABRICS)
        if p.detect.kind == "libfabric-provider" and p.detect.provider
    )
)


# Every external command the probe runs, by name (recorded outputs use these names).
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
    facts.slurm_version = parse_version(text("sinfo_version")) if text("sinfo_version") else None
    facts.slurm_mpi_plugins = parse_srun_mpi_list(text("srun_mpi_list"))
    for runtime in CONTAINER_RUNTIMES:
        facts.runtimes[runtime] = parse_version(text(runtime)) if text(runtime) else None
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


def merge_gids(*sources: list[gids.Gid]) -> list[gids.Gid]:
    """One entry per (device, port, index): the first source wins."""
    merged: dict[tuple[str, int, int], gids.Gid] = {}
    for found in sources:
        for gid in found:
            merged.setdefault((gid.device, gid.port, gid.index), gid)
    return list(merged.values())
