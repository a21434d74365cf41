"""Where a rank sits: its CPU set, NUMA node(s), GPU and the NIC its traffic uses.

Read from the rank's own view (inside the container, if any): the affinity
mask (`os.sched_getaffinity`), /sys/devices/system/node, /sys/class/net and
/sys/class/infiniband (each NIC's PCI `numa_node`), `nvidia-smi` for the GPU's
PCI bus and /sys/bus/pci for its NUMA node. What cannot be read here is
`None` with the reason in `unknown` (no nvidia-smi, a virtual NIC without a PCI
device): never a guess.

`flags(records)` (used by launch/ on the train records) names a rank whose GPU
and NIC sit on different NUMA nodes (nccl-tests#350: the far-NUMA NIC), a rank
whose CPUs reach beyond its GPU's local ones (floating across sockets), and
ranks on one host pinned to overlapping cores. `pin_near_gpu` keeps a GPU rank
on its GPU's CPUs (the launchers bind CPU runs: launch.ranks.launchers).

Imports nothing from launch/ and no framework: it runs inside the image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Mapping

NvidiaSmi = Callable[[list[str]], str]
"""Runs nvidia-smi (its argv) and returns its output; tests pass a recorded one."""

# Variables naming the interface or device a rank's traffic uses, most specific first.
NIC_VARIABLES = (
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "OMPI_MCA_btl_tcp_if_include",
    "FI_TCP_IFACE",
    "GLOO_SOCKET_IFNAME",
    "HOROVOD_GLOO_IFACE",
)


def cpu_list_text(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, start = [], None
    for i, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            out.append(f"{start}-{cpu}" if cpu != start else str(cpu))
            start = None
    return ",".join(out)


def parse_cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def numa_nodes(root: Path = Path("/")) -> dict[int, list[int]]:
    """NUMA node -> its CPUs."""
    nodes = {}
    for node in sorted((root / "sys/devices/system/node").glob("node[0-9]*")):
        text = _read(node / "cpulist")
        if text is not None:
            nodes[int(node.name[4:])] = parse_cpu_list(text)
    return nodes


def numa_node_of(device: Path) -> int | None:
    """The NUMA node of a device, from it or its nearest ancestor that says (virtio -> its PCI device)."""
    try:
        path = device.resolve()
    except OSError:
        return None
    for candidate in (path, *path.parents):
        text = _read(candidate / "numa_node")
        if text is not None:
            return int(text) if re.fullmatch(r"-?\d+", text) and int(text) >= 0 else None
        if candidate.name == "devices":
            break
    return None


def traffic_nic(env: Mapping[str, str] = os.environ) -> tuple[str | None, str | None]:
    """(first interface or device named by the run's selection variables, the variable)."""
    for name in NIC_VARIABLES:
        value = env.get(name, "").strip()
        if not value or value.startswith("^"):
            continue
        first = value.lstrip("=").split(",")[0].split(":")[0].strip()
        if first:
            return first, name
    return None, None


MAX_LISTED_NICS = 32


def parse_ib_rate(text: str) -> float | None:
    """An RDMA port's rate as sysfs (/sys/class/infiniband/DEV/ports/N/rate: `100 Gb/sec (4X EDR)`)
    or ibstat (`100`) write it -> 100.0 (Gbit/s); launch/ reads the probe's ports and a run's NIC with it."""
    match = re.match(r"\s*(\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def listed_nics(env: Mapping[str, str] = os.environ) -> tuple[list[str], str | None]:
    """Every interface or device the run's first selection variable lists (a multi-rail node's
    NCCL_IB_HCA names all its rails; which one each rank used, NCCL's log says: launch reads it)."""
    first, variable = traffic_nic(env)
    if variable is None:
        return [], None
    names = [v.split(":")[0].strip() for v in env.get(variable, "").lstrip("=").split(",") if v.strip()]
    return names[:MAX_LISTED_NICS], variable


PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# where a fabric's devices are listed: RDMA (InfiniBand, RoCE, Omni-Path, EFA), Slingshot's CXI
FABRIC_DEVICE_CLASSES = ("sys/class/infiniband", "sys/class/cxi")


def fabric_nics(root: Path = Path("/")) -> list[dict]:
    """Every fabric device this rank's host shows: name, PCI address and NUMA node. NCCL's plugins
    may name a NIC by PCI address alone (aws-ofi-nccl: "NIC group 7 device #0 0000:a3:00.0"), which
    only the host that ran the rank can place: so it is read here, beside the rank."""
    found = []
    for folder in FABRIC_DEVICE_CLASSES:
        for dev in sorted((root / folder).glob("*"))[:MAX_LISTED_NICS]:
            try:
                bus = (dev / "device").resolve().name.lower()
            except OSError:
                bus = ""
            found.append(
                {
                    "name": dev.name,
                    "pci_bus": bus if PCI_ADDRESS.fullmatch(bus) else None,
                    "numa_node": numa_node_of(dev / "device"),
                }
            )
    return found[:MAX_LISTED_NICS]


def default_route_interface(root: Path = Path("/")) -> str | None:
    text = _read(root / "proc/net/route") or ""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def nic_placement(name: str | None, source: str | None, root: Path = Path("/")) -> dict:
    if name is None:
        name, source = default_route_interface(root), "default route"
    if name is None:
        return {"name": None, "numa_node": None, "unknown": "no interface named and no default route"}
    for kind, base in (("rdma", root / "sys/class/infiniband" / name), ("net", root / "sys/class/net" / name)):
        if base.exists():
            device = base / "device"
            if not device.exists():
                return {
                    "name": name,
                    "kind": kind,
                    "source": source,
                    "numa_node": None,
                    "unknown": f"{name} has no PCI device (virtual interface): NUMA node unknown",
                }
            numa = numa_node_of(device)
            return {
                "name": name,
                "kind": kind,
                "source": source,
                "numa_node": numa,
                **({} if numa is not None else {"unknown": f"{name}: the kernel reports no NUMA node"}),
            }
    return {"name": name, "source": source, "numa_node": None, "unknown": f"{name} not found in /sys here"}


# Set to 1 where ranks share one GPU on purpose (the GPU check on a one-GPU machine; bench.torch_device)
SHARED_GPU_ENV = "FABRIC_BENCH_SHARED_GPU"


def nvidia_gpus_visible(env: Mapping[str, str] = os.environ, root: Path = Path("/")) -> bool:
    """Whether this process can use an NVIDIA GPU: a device node exists and CUDA_VISIBLE_DEVICES
    (when set) leaves at least one device ("" and "-1" hide them all)."""
    if not any((root / "dev").glob("nvidia[0-9]*")):
        return False
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return visible is None or visible.strip() not in ("", "-1")


def gpu_placement(
    local_rank: int, env: Mapping[str, str] = os.environ, root: Path = Path("/"), run: NvidiaSmi | None = None
) -> dict:
    """The rank's GPU (CUDA_VISIBLE_DEVICES and the local rank), its PCI bus and NUMA node."""
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    index = visible[local_rank % len(visible)] if visible else str(local_rank)
    if run is None and shutil.which("nvidia-smi") is None:
        return {"index": index, "pci_bus": None, "numa_node": None, "unknown": "nvidia-smi not available"}
    argv = ["nvidia-smi", f"--id={index}", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
    try:
        out = run(argv) if run else subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"index": index, "pci_bus": None, "numa_node": None, "unknown": f"nvidia-smi failed: {exc}"}
    match = re.search(r"(\d+),\s*([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)", out or "")
    if not match:
        return {"index": index, "pci_bus": None, "numa_node": None, "unknown": "nvidia-smi gave no PCI bus"}
    bus = match.group(2).lower()
    bus = bus[-12:] if len(bus) > 12 else bus  # 00000000:07:00.0 -> 0000:07:00.0
    numa = numa_node_of(root / "sys/bus/pci/devices" / bus)
    local = gpu_local_cpus(bus, root)
    return {
        "index": int(match.group(1)),
        "pci_bus": bus,
        "numa_node": numa,
        **({"local_cpus": cpu_list_text(local)} if local else {}),
        **({} if numa is not None else {"unknown": f"no numa_node for {bus} in sysfs"}),
    }


def gpu_local_cpus(bus: str | None, root: Path = Path("/")) -> list[int] | None:
    """The CPUs next to a GPU: its PCI device's local_cpulist (the CPUs of its NUMA node, or of
    every node where the platform names none); None where sysfs does not say."""
    text = _read(root / "sys/bus/pci/devices" / bus / "local_cpulist") if bus else None
    return parse_cpu_list(text) or None if text else None


def pin_near_gpu(
    gpu: Mapping,
    root: Path = Path("/"),
    affinity: list[int] | None = None,
    set_affinity: Callable[[int, set[int]], None] | None = None,
) -> dict:
    """Keep this rank on the CPUs next to its GPU (issue 49): its CPU set narrowed to the GPU's
    local_cpulist, within what the launcher gave it (never widened: a launcher's or a cgroup's
    binding stands). A launcher cannot place GPU ranks by the GPUs' sockets (mpirun sees no GPUs;
    GPU numbering need not follow the sockets), the rank reads it from sysfs. What was done is
    returned; nothing is guessed: no local CPUs known, or none among the launcher's, leaves the
    CPU set as it was and says why."""
    current = set(affinity if affinity is not None else os.sched_getaffinity(0))
    local = gpu_local_cpus(gpu.get("pci_bus"), root)
    if not local:
        return {"pinned": False, "why": f"no local_cpulist for GPU {gpu.get('index')} ({gpu.get('pci_bus')})"}
    target = current & set(local)
    if not target:
        return {
            "pinned": False,
            "why": f"none of the launcher's CPUs ({cpu_list_text(sorted(current))}) is next to GPU "
            f"{gpu.get('index')} ({cpu_list_text(local)})",
        }
    if target != current:
        (set_affinity or os.sched_setaffinity)(0, target)
    return {"pinned": True, "cpus": cpu_list_text(sorted(target))}


def rank_placement(
    local_rank: int,
    gpu: bool,
    env: Mapping[str, str] = os.environ,
    root: Path = Path("/"),
    run: NvidiaSmi | None = None,
    affinity: list[int] | None = None,
) -> dict:
    """Everything above for this process; every value read, none assumed."""
    cpus = sorted(affinity if affinity is not None else os.sched_getaffinity(0))
    nodes = numa_nodes(root)
    online = _read(root / "sys/devices/system/cpu/online")
    all_cpus = parse_cpu_list(online) if online else None
    place = {
        "cpus": cpu_list_text(cpus),
        "cpu_count": len(cpus),
        "pinned": (set(cpus) != set(all_cpus)) if all_cpus else None,
        "numa_nodes": sorted(n for n, members in nodes.items() if set(members) & set(cpus)) if nodes else None,
        "gpu": gpu_placement(local_rank, env, root, run) if gpu else None,
        "nic": nic_placement(*traffic_nic(env), root=root),
        # each listed rail's NUMA node: the NIC NCCL gives this rank is known only after the run
        "listed_nics": [
            nic_placement(name, variable, root=root)
            for name, variable in ((n, listed_nics(env)[1]) for n in listed_nics(env)[0])
        ],
        "fabric_nics": fabric_nics(root),
        "hwloc": "present" if shutil.which("hwloc-calc") or shutil.which("lstopo") else "absent",
    }
    return place


# ---------------------------------------------------------------- judging a run's ranks


def with_nccl_nics(place: dict, used: list[str] | None) -> dict:
    """A rank's placement with the NICs NCCL says it used (its NET/<network>/<dev> channel lines: IB,
    Socket, OFI) in place of the first one its selection variables list: a two-socket, multi-rail
    node gives each rank a NIC of its own, and an EFA or Slingshot rank's NIC is not its socket
    interface. A NIC is found among those listed, else among the host's fabric devices by name or
    PCI address; one found nowhere has no NUMA node (unknown, never a guess)."""
    if not used:
        return place
    known = {n.get("name"): n for n in place.get("listed_nics") or []}
    for nic in place.get("fabric_nics") or []:
        for key in (nic.get("name"), nic.get("pci_bus")):
            if key:
                known.setdefault(key, nic)
    nics = [
        known.get(name) or {"name": name, "numa_node": None, "unknown": f"{name}: not among this host's known NICs"}
        for name in used
    ]
    numas: set[int] = {n["numa_node"] for n in nics if isinstance(n.get("numa_node"), int)}
    gpu_numa = (place.get("gpu") or {}).get("numa_node")
    nearest = gpu_numa if gpu_numa in numas else (min(numas) if len(numas) == 1 else None)
    nic = {
        "name": ",".join(used),
        "source": "NCCL's channel lines (NET/<network>/<dev>)",
        "numa_node": nearest,
        "numa_nodes": sorted(numas),
        **({} if numas else {"unknown": "no NUMA node known for NCCL's NICs"}),
    }
    return {**place, "nic": nic}


def flags(records: list[dict], rank_nics: dict[int, list[str]] | None = None) -> dict:
    """The placement of every rank (from its train record) and what is wrong with it; `rank_nics`:
    the NICs NCCL used for each rank (launch.results.transport.nccl_rank_nics), where known."""
    ranks = [
        {**r, "placement": with_nccl_nics(r["placement"], (rank_nics or {}).get(r["rank"]))}
        for r in records
        if r.get("kind") == "train" and r.get("placement")
    ]
    problems: list[dict] = []
    for r in ranks:
        p = r["placement"]
        gpu_numa = (p.get("gpu") or {}).get("numa_node")
        nic_numa = (p.get("nic") or {}).get("numa_node")
        if gpu_numa is not None and nic_numa is not None and gpu_numa != nic_numa:
            problems.append(
                {
                    "rank": r["rank"],
                    "problem": "gpu_nic_numa_mismatch",
                    "detail": f"GPU {p['gpu'].get('index')} on NUMA node {gpu_numa}, "
                    f"NIC {p['nic'].get('name')} on NUMA node {nic_numa}",
                }
            )
        local = (p.get("gpu") or {}).get("local_cpus")
        if local and p.get("cpus") and not set(parse_cpu_list(p["cpus"])) <= set(parse_cpu_list(local)):
            problems.append(
                {
                    "rank": r["rank"],
                    "problem": "cpus_far_from_gpu",
                    "detail": f"CPUs {p['cpus']} reach beyond GPU {p['gpu'].get('index')}'s own ({local})",
                }
            )
    by_host: dict[str, list[dict]] = {}
    for r in ranks:
        by_host.setdefault(r.get("host", "?"), []).append(r)
    for host, members in by_host.items():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if not (a["placement"].get("pinned") and b["placement"].get("pinned")):
                    continue  # unpinned ranks float: the scheduler shares cores, nobody asked otherwise
                shared = set(parse_cpu_list(a["placement"]["cpus"])) & set(parse_cpu_list(b["placement"]["cpus"]))
                if shared:
                    problems.append(
                        {
                            "rank": b["rank"],
                            "problem": "shared_cores",
                            "detail": f"ranks {a['rank']} and {b['rank']} on {host} are both pinned "
                            f"to CPUs {cpu_list_text(sorted(shared))}",
                        }
                    )
    unknown = sorted(
        {
            f"{k}: {v['unknown']}"
            for r in ranks
            for k in ("gpu", "nic")
            if isinstance(v := r["placement"].get(k), dict) and v.get("unknown")
        }
    )
    # a GPU rank whose GPU or NIC NUMA node is unknown: the far-NUMA check could not run
    unchecked = [
        r
        for r in ranks
        if r["placement"].get("gpu") is not None
        and None in (r["placement"]["gpu"].get("numa_node"), (r["placement"].get("nic") or {}).get("numa_node"))
    ]
    return {
        "ranks": [{"rank": r["rank"], "host": r.get("host"), **r["placement"]} for r in ranks],
        "problems": problems,
        "verdict": "flagged" if problems else ("unknown" if not ranks or unchecked else "ok"),
        "unknown": unknown,
    }
