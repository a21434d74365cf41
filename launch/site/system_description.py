"""An MLPerf-style system description (systems/<name>.json) filled from the host
probe, the results and the captured software stack. Fields nobody can know
from here (cooling, storage) are left empty for the submitter to complete.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from launch.results.result import typed
from launch.site.probe import HostFacts, verdicts


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def sockets(cpuinfo: str) -> int:
    ids = set(re.findall(r"^physical id\s*:\s*(\d+)", cpuinfo, re.M))
    return max(1, len(ids))


def memory_gib(meminfo: str) -> str:
    match = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    return f"{int(match.group(1)) / 2**20:.0f} GiB" if match else ""


def operating_system(os_release: str) -> str:
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)', os_release, re.M)
    return f"{match.group(1) if match else platform.system()}, kernel {platform.release()}"


def networking(facts: HostFacts) -> tuple[str, int]:
    """Human description of the host's fabrics, and its network card count."""
    usable = [f"{name}: {v.reason}" for name, v in verdicts(facts).items() if v.usable]
    devices = sorted({p.device for p in facts.rdma_ports})
    nics = [n for n in facts.nics if n.name != "lo" and n.operstate == "up"]
    return "; ".join(usable) or "none usable", len(devices) or len(nics)


def frameworks(results: list[dict]) -> str:
    names = {"torch": "PyTorch", "tensorflow": "TensorFlow", "horovod": "Horovod"}
    seen = {}
    for fields in filter(None, map(typed, results)):
        for key, label in names.items():
            if (fields.versions or {}).get(key):
                seen[label] = (fields.versions or {})[key]
    return ", ".join(f"{name} {version}" for name, version in seen.items())


def describe(
    facts: HostFacts,
    results: list[dict],
    software: dict,
    *,
    system_name: str,
    submitter: str = "",
    division: str = "open",
) -> dict:
    host_networking, cards = networking(facts)
    cpuinfo = _read("/proc/cpuinfo")
    gpus = facts.gpus
    stack = {**(software.get("versions") or {})}
    return {
        "submitter": submitter,
        "division": division,
        "status": "research",
        "system_name": system_name,
        "number_of_nodes": max(
            [(f.spec.nodes if f.spec else None) or 1 for f in filter(None, map(typed, results))] or [1]
        ),
        "host_processors_per_node": sockets(cpuinfo),
        "host_processor_model_name": facts.cpu_model or "",
        "host_processor_vcpu_count": facts.cpu_count,
        "host_memory_capacity": memory_gib(_read("/proc/meminfo")),
        "host_networking": host_networking,
        "host_network_card_count": cards,
        "host_networking_topology": "",
        "accelerators_per_node": len(gpus),
        "accelerator_model_name": gpus[0].name if gpus else "",
        "accelerator_memory_capacity": f"{gpus[0].memory_mib} MiB" if gpus and gpus[0].memory_mib else "",
        "framework": frameworks(results),
        "operating_system": operating_system(_read("/etc/os-release")),
        "other_software_stack": stack,
        "cooling": "",
        "hw_notes": "",
        "sw_notes": f"software captured on {software.get('where', 'host')} by fabric-bench archive",
    }
