"""Per fabric, from a host's facts: usable or not, and why (each fabric profile's detection
kind judged by its detector), and the probe's JSON report."""

from __future__ import annotations

import dataclasses
from typing import Callable

from containers.fabrics import HOST_FABRICS, FabricProfile, profile
from launch.site import gids
from launch.site.probe.facts import HostFacts, RdmaPort, Verdict


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
