"""An MLPerf-style system description (systems/<name>.json) filled from the host
probe, the results, the captured software stack and the site file, and how complete the
description of each result is for a reviewer.

`describe` writes the system's file: what the probe and the results tell (the MLPerf fields),
the network interfaces' drivers and firmware, and what the site file adds (its fabrics' devices
and line rates, runtime, launcher). Fields nobody can know from here (cooling, the network's
topology beyond one host) are left empty for the submitter to complete.

`description_of` is what a reviewer of ONE result gets: each field of NEEDS read from the result
itself (fabric, transport evidence, placement, versions, ...), else from the site file, else from
the system description that travelled with it, and the score: the summed weights of the fields
known, 0..1. NEEDS is the one table of those fields and their weights (docs/sharing.md lists it);
a score under COMPLETE_FROM is an "incomplete description", and says which fields are missing.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from launch.results.result import Result, typed
from launch.schema import ResultSchema, number
from launch.site.config import Site
from launch.site.probe import HostFacts, verdicts

COMPLETE_FROM = 0.90  # a description scoring below this is an "incomplete description"
MAX_TEXT = 300  # a field's value from elsewhere, shown at most this long


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


def network_drivers(facts: HostFacts) -> str:
    """The kernel drivers of the host's interfaces that are up ("eth0 virtio_net"); "" if none is known."""
    named = [f"{n.name} {n.driver}" for n in facts.nics if n.name != "lo" and n.operstate == "up" and n.driver]
    return ", ".join(named)


def firmware_from_ibv_devinfo(text: str) -> dict[str, str]:
    """`ibv_devinfo` output -> RDMA device -> its firmware version (`fw_ver`)."""
    found, device = {}, None
    for line in text.splitlines():
        head = re.match(r"hca_id:\s*(\S+)", line)
        if head:
            device = head.group(1)
        version = re.match(r"\s+fw_ver:\s*(\S+)", line)
        if version and device:
            found[device] = version.group(1)
    return found


def firmware_from_sysfs(root: Path = Path("/")) -> dict[str, str]:
    """RDMA device -> firmware version, from /sys/class/infiniband/*/fw_ver (the file ibv_devinfo reads)."""
    found = {}
    base = root / "sys/class/infiniband"
    for device in sorted(base.iterdir()) if base.is_dir() else []:
        version = _read(str(device / "fw_ver")).strip()
        if version:
            found[device.name] = version
    return found


def frameworks(results: list[Result]) -> str:
    names = {"torch": "PyTorch", "tensorflow": "TensorFlow", "horovod": "Horovod"}
    seen = {}
    for fields in filter(None, map(typed, results)):
        for key, label in names.items():
            if (fields.versions or {}).get(key):
                seen[label] = (fields.versions or {})[key]
    return ", ".join(f"{name} {version}" for name, version in seen.items())


def site_part(site: Site) -> dict:
    """What the site file adds to the system description: runtime, launcher, scheduler partition,
    and each fabric's interface, devices (rails) and line rate."""
    return {
        "runtime": site.runtime,
        "launcher": site.launcher,
        "partition": site.scheduler.partition or "",
        "fabrics": {
            name: {
                "interface": fabric.interface or "",
                "devices": list(fabric.devices),
                "link_gbit_s": fabric.link_gbit_s,
            }
            for name, fabric in sorted(site.fabrics.items())
        },
    }


def describe(
    facts: HostFacts,
    results: list[Result],
    software: dict,
    *,
    system_name: str,
    submitter: str = "",
    division: str = "open",
    site: Optional[Site] = None,
    root: Path = Path("/"),
) -> dict:
    host_networking, cards = networking(facts)
    cpuinfo = _read(str(root / "proc/cpuinfo"))
    gpus = facts.gpus
    stack = {**(software.get("versions") or {})}
    firmware = firmware_from_sysfs(root)
    system = {
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
        "host_memory_capacity": memory_gib(_read(str(root / "proc/meminfo"))),
        "host_networking": host_networking,
        "host_network_card_count": cards,
        "host_network_drivers": network_drivers(facts),
        "host_network_firmware": ", ".join(f"{device} {version}" for device, version in firmware.items()),
        "host_networking_topology": "",
        "accelerators_per_node": len(gpus),
        "accelerator_model_name": gpus[0].name if gpus else "",
        "accelerator_memory_capacity": f"{gpus[0].memory_mib} MiB" if gpus and gpus[0].memory_mib else "",
        "framework": frameworks(results),
        "operating_system": operating_system(_read(str(root / "etc/os-release"))),
        "other_software_stack": stack,
        "cooling": "",
        "hw_notes": "",
        "sw_notes": f"software captured on {software.get('where', 'host')} by fabric-bench archive",
    }
    if site is not None:
        system["site_file"] = site_part(site)
    scored = [description_of(r, site=site, system=system) for r in results]
    system["completeness"] = {
        "score": min((d.score for d in scored), default=0.0),
        "missing": [need.name for need in NEEDS if any(need.name in d.missing for d in scored)],
        "fields": {need.name: need.weight for need in NEEDS},
        "complete_from": COMPLETE_FROM,
    }
    return system


# ------------------------------------------------------------------ what a reviewer needs


@dataclass(frozen=True)
class Sources:
    """What a description is read from: the result's typed fields, the site file, the system
    description (a dict of text and numbers; another site's is checked by `system_fields` first)."""

    result: ResultSchema
    site: Optional[Site]
    system: dict


Found = Optional[tuple[str, str]]  # (the value in words, where it came from), None: not known


@dataclass(frozen=True)
class Need:
    """One field a reviewer needs: its name, its weight in the score, what it tells, how it is read."""

    name: str
    weight: float
    tells: str
    read: Callable[[Sources], Found]


def _extra(fields: ResultSchema, name: str) -> Any:
    """A field the result carries beside the declared ones (placement, emulation, plausibility, ...)."""
    return getattr(fields, name, None)


def _text(value: Any) -> str:
    """A value as one bounded line of text ("" for nothing)."""
    if value is None or isinstance(value, (dict, list)) and not value:
        return ""
    return " ".join(str(value).split())[:MAX_TEXT]


def _system(sources: Sources, *names: str) -> Found:
    """The first non-empty of the system description's fields `names`."""
    for name in names:
        text = _text(sources.system.get(name))
        if text and text != "none usable":
            return text, "system description"
    return None


def _one_host(fields: ResultSchema) -> bool:
    """Every rank on one host and no emulated link: nothing crossed a network."""
    nodes = fields.spec.nodes if fields.spec else None
    return len(set(fields.hosts or [])) <= 1 and (nodes or 1) == 1 and _extra(fields, "emulation") is None


ONE_HOST = ("not applicable: one host, no traffic crossed a network", "result")


def _fabric_of(fields: ResultSchema) -> Optional[str]:
    transport = fields.transport or {}
    return (fields.spec.fabric if fields.spec else None) or transport.get("fabric")


@dataclass(frozen=True)
class SiteFabric:
    """What a site file says of one fabric: its interface, devices (rails) and line rate."""

    interface: str
    devices: tuple[str, ...]
    link_gbit_s: Optional[float]
    source: str  # "site file", or "site file (in the system description)"


def _site_fabric(sources: Sources) -> Optional[SiteFabric]:
    """The run's fabric as the site file given says it, else as the system description's copy does."""
    fabric = _fabric_of(sources.result)
    given = sources.site.fabrics.get(fabric) if sources.site is not None and fabric else None
    if given is not None:
        return SiteFabric(given.interface or "", given.devices, given.link_gbit_s, "site file")
    carried = (sources.system.get("site_fabrics") or {}).get(fabric) if fabric else None
    if isinstance(carried, dict):
        return SiteFabric(**carried, source="site file (in the system description)")
    return None


def read_fabric(sources: Sources) -> Found:
    fabric = _fabric_of(sources.result)
    return (fabric, "result") if fabric else None


def read_transport(sources: Sources) -> Found:
    transport = sources.result.transport or {}
    checks = [c for c in transport.get("checks") or [] if isinstance(c, dict) and c.get("observed")]
    if not checks:
        return None
    seen = ", ".join(f"{c.get('layer')} {'/'.join(map(str, c['observed']))}" for c in checks)
    return f"{seen} ({transport.get('verdict') or 'checked'})", "result"


def _placement_nics(fields: ResultSchema) -> list[str]:
    placement = _extra(fields, "placement")
    ranks = placement.get("ranks") if isinstance(placement, dict) else None
    nics = [(r.get("nic") or {}).get("name") for r in ranks or [] if isinstance(r, dict)]
    return sorted({str(n) for n in nics if n})


def read_interfaces(sources: Sources) -> Found:
    fields = sources.result
    nics = _placement_nics(fields)
    if nics:
        return ", ".join(nics), "result"
    emulation = _extra(fields, "emulation")
    if isinstance(emulation, dict) and emulation.get("interface"):
        return f"{emulation['interface']} (emulated link)", "result"
    fabric = _site_fabric(sources)
    if fabric is not None and (fabric.interface or fabric.devices):
        return ", ".join([*([fabric.interface] if fabric.interface else []), *fabric.devices]), fabric.source
    if _one_host(fields):
        return ONE_HOST
    return _system(sources, "host_networking")


def read_firmware(sources: Sources) -> Found:
    if _one_host(sources.result):
        return ONE_HOST
    return _system(sources, "host_network_firmware")


def read_drivers(sources: Sources) -> Found:
    if _one_host(sources.result):
        return ONE_HOST
    return _system(sources, "host_network_drivers")


def read_line_rate(sources: Sources) -> Found:
    fields = sources.result
    if fields.link_rate_gbit_s:
        return f"{fields.link_rate_gbit_s:g} Gbit/s", "result"
    plausible = _extra(fields, "plausibility")
    if isinstance(plausible, dict) and isinstance(plausible.get("link_rate_gbit_s"), (int, float)):
        return f"{plausible['link_rate_gbit_s']:g} Gbit/s ({_text(plausible.get('link_rate_source'))})", "result"
    fabric = _site_fabric(sources)
    if fabric is not None and fabric.link_gbit_s:
        return f"{fabric.link_gbit_s:g} Gbit/s", fabric.source
    return ONE_HOST if _one_host(fields) else None


def read_topology(sources: Sources) -> Found:
    fields = sources.result
    emulation = _extra(fields, "emulation")
    if isinstance(emulation, dict) and emulation.get("nodes"):
        return f"emulated: {_text(emulation['nodes'])} as network namespaces on one host", "result"
    if _one_host(fields):
        return ONE_HOST
    return _system(sources, "host_networking_topology")


def read_scale(sources: Sources) -> Found:
    fields = sources.result
    nodes = fields.spec.nodes if fields.spec else None
    if not fields.world_size:
        return None
    hosts = sorted(set(fields.hosts or []))
    on = f" on {', '.join(hosts)}" if hosts else ""
    return f"{nodes or 1} node(s) x {fields.world_size // (nodes or 1)} rank(s){on}", "result"


def read_placement(sources: Sources) -> Found:
    placement = _extra(sources.result, "placement")
    ranks = placement.get("ranks") if isinstance(placement, dict) else None
    if not ranks:
        return None
    cpus = [f"rank {r.get('rank')}: cpus {r.get('cpus')}" for r in ranks if isinstance(r, dict)]
    return f"{'; '.join(cpus)} ({placement.get('verdict')})", "result"


# the libraries that carry a run's traffic, as results and software captures name their versions
COMMUNICATION_LIBRARIES = ("mpi", "openmpi", "mpich", "ucx", "libfabric", "nccl", "nccl_net", "gloo", "horovod")


def read_plugins(sources: Sources) -> Found:
    versions = sources.result.versions or {}
    found = {name: versions[name] for name in COMMUNICATION_LIBRARIES if versions.get(name)}
    if found:
        return ", ".join(f"{name} {_text(v)[:40]}" for name, v in found.items()), "result"
    stack = sources.system.get("other_software_stack")
    found = {name: stack[name] for name in COMMUNICATION_LIBRARIES if isinstance(stack, dict) and stack.get(name)}
    if found:
        return ", ".join(f"{name} {_text(v)[:40]}" for name, v in found.items()), "system description"
    return None


def read_stack(sources: Sources) -> Found:
    fields = sources.result
    image = fields.image or {}
    digest = image.get("stack_digest") or image.get("digest")
    if digest:
        return f"image stack {_text(digest)}", "result"
    versions = fields.versions or {}
    if versions:
        return "host: " + ", ".join(f"{k} {_text(v)[:24]}" for k, v in sorted(versions.items())), "result"
    return None


def read_processors(sources: Sources) -> Found:
    model, memory = (_text(sources.system.get(k)) for k in ("host_processor_model_name", "host_memory_capacity"))
    return (f"{model}, {memory}", "system description") if model and memory else None


def read_accelerators(sources: Sources) -> Found:
    fields = sources.result
    gpus = fields.spec.gpus_per_node if fields.spec else None
    if gpus == 0:
        return "none: a CPU run", "result"
    return _system(sources, "accelerator_model_name")


# The one table of what a reviewer needs: name, weight (they sum to 1), what it tells, its reader.
NEEDS: tuple[Need, ...] = (
    Need("fabric", 0.10, "the fabric the run asked for", read_fabric),
    Need("transport_evidence", 0.15, "what carried the traffic, as the run's own logs showed it", read_transport),
    Need("network_interfaces", 0.10, "the NICs or HCAs the ranks' traffic used", read_interfaces),
    Need("nic_firmware", 0.05, "those NICs' firmware", read_firmware),
    Need("drivers", 0.05, "the kernel drivers of those NICs", read_drivers),
    Need("line_rate", 0.05, "the line rate of one NIC", read_line_rate),
    Need("topology", 0.10, "how the nodes are connected", read_topology),
    Need("scale", 0.05, "nodes x ranks per node, and the hosts", read_scale),
    Need("placement", 0.10, "where each rank sat (cores, NUMA node, GPU, NIC)", read_placement),
    Need("plugin_versions", 0.10, "versions of the communication libraries (MPI, UCX, libfabric, NCCL)", read_plugins),
    Need("stack", 0.05, "the software stack: the image's stack digest, or the host's versions", read_stack),
    Need("processors_memory", 0.05, "CPU model and memory per node", read_processors),
    Need("accelerators", 0.05, "the accelerators (none for a CPU run)", read_accelerators),
)


@dataclass(frozen=True)
class Description:
    """One result's description: each need's value and where it came from (None: missing)."""

    found: dict[str, Found]

    @property
    def score(self) -> float:
        return round(sum(need.weight for need in NEEDS if self.found.get(need.name)), 6)

    @property
    def missing(self) -> list[str]:
        return [need.name for need in NEEDS if not self.found.get(need.name)]

    @property
    def complete(self) -> bool:
        return self.score >= COMPLETE_FROM

    def words(self) -> str:
        """'complete description (95 %)' or 'incomplete description (80 %): missing placement, line_rate'."""
        if self.complete:
            return f"complete description ({self.score:.0%})"
        return f"incomplete description ({self.score:.0%}): missing {', '.join(self.missing)}"

    def as_dict(self) -> dict:
        return {
            "score": self.score,
            "complete": self.complete,
            "missing": self.missing,
            "fields": {
                name: ({"value": found[0], "from": found[1]} if found else None) for name, found in self.found.items()
            },
        }


# the system description fields a description reads (system_fields keeps only these, as text)
SYSTEM_FIELDS = (
    "system_name",
    "host_networking",
    "host_network_drivers",
    "host_network_firmware",
    "host_networking_topology",
    "host_processor_model_name",
    "host_memory_capacity",
    "accelerator_model_name",
)


def system_fields(value: object) -> dict:
    """Another site's system description, as far as a description reads it: the SYSTEM_FIELDS
    that are text or numbers (bounded), and `other_software_stack`'s text values; anything else
    is dropped. {} for anything that is not an object."""
    if not isinstance(value, dict):
        return {}
    kept: dict[str, Any] = {
        name: _text(value[name])
        for name in SYSTEM_FIELDS
        if isinstance(value.get(name), (str, int, float)) and not isinstance(value.get(name), bool)
    }
    stack = value.get("other_software_stack")
    if isinstance(stack, dict):
        kept["other_software_stack"] = {
            str(k)[:40]: _text(v) for k, v in list(stack.items())[:64] if isinstance(v, (str, int, float))
        }
    site = value.get("site_file")
    fabrics = site.get("fabrics") if isinstance(site, dict) else None
    if isinstance(fabrics, dict):
        kept["site_fabrics"] = {
            str(name)[:40]: _site_fabric_fields(fabric) for name, fabric in list(fabrics.items())[:16]
        }
    return kept


def _site_fabric_fields(fabric: object) -> dict:
    """A fabric of a system description's `site_file` part (site_part), as SiteFabric's fields:
    text, a few device names and a positive line rate; anything else is left empty."""
    given = fabric if isinstance(fabric, dict) else {}
    interface, devices, rate = given.get("interface"), given.get("devices"), given.get("link_gbit_s")
    return {
        "interface": _text(interface)[:64] if isinstance(interface, str) else "",
        "devices": tuple(_text(d)[:64] for d in devices[:16] if isinstance(d, str))
        if isinstance(devices, list)
        else (),
        "link_gbit_s": gbit_s if (gbit_s := number(rate)) is not None and gbit_s > 0 else None,
    }


def description_of(result: Result, *, site: Optional[Site] = None, system: Optional[dict] = None) -> Description:
    """What a reviewer knows of `result`'s system (module docstring); a result whose fields are
    not of their shapes has an empty description (score 0)."""
    fields = typed(result)
    if fields is None:
        return Description({need.name: None for need in NEEDS})
    sources = Sources(fields, site, system_fields(system) if system is not None else {})
    return Description({need.name: need.read(sources) for need in NEEDS})
