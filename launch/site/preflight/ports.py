"""The run's RDMA ports on the host: each named port is on the fabric's link layer (an
InfiniBand preset on a RoCE port, or the reverse, fails), and where the preset addresses peers
by a GID index (RoCE), the entry it names is a routable RoCE v2 one (launch.site.gids)."""

from __future__ import annotations

from pathlib import Path

from containers.fabrics import PROFILES, FabricProfile
from launch.site import gids
from launch.site.preflight.checks import Check

GID_INDEX_VARIABLES = ("NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX")


def run_ports(env: dict[str, str]) -> list[tuple[str, int]]:
    """(device, port) of every rail the preset names (UCX_NET_DEVICES' device:port list)."""
    ports = []
    for item in env.get("UCX_NET_DEVICES", "").split(","):
        device, _, port = item.strip().partition(":")
        if device and (port or "1").isdigit():
            ports.append((device, int(port or "1")))
    return ports


def port_checks(fabric: FabricProfile | None, env: dict[str, str], root: Path = Path("/")) -> list[Check]:
    if fabric is None or fabric.detect.kind != "rdma-port" or not fabric.detect.link_layer:
        return []
    checks = []
    wanted = fabric.detect.link_layer
    index_text = next((env[v] for v in GID_INDEX_VARIABLES if env.get(v) not in (None, "")), None)
    for device, port in run_ports(env):
        name = f"{device} port {port}"
        layer = gids.link_layer(root, device, port)
        if layer is None:
            checks.append(
                Check(
                    f"rdma port {name}",
                    "fail",
                    f"no {name} in /sys/class/infiniband on this host",
                    fix="name the host's device in the site file (fabric-bench probe lists them)",
                )
            )
            continue
        if layer != wanted:
            other = next(
                (p.name for p in PROFILES.values() if p.detect.kind == "rdma-port" and p.detect.link_layer == layer),
                None,
            )
            checks.append(
                Check(
                    f"rdma port {name}",
                    "fail",
                    f"{name} is on {layer}, not {wanted}",
                    fix=f"use --fabric {other}" if other else "name a port of this fabric",
                )
            )
            continue
        checks.append(Check(f"rdma port {name}", "ok", f"link layer {layer}"))
        if index_text is None:
            continue
        if not index_text.lstrip("-").isdigit():
            checks.append(
                Check(
                    f"gid {name}",
                    "fail",
                    f"GID index {index_text!r} is not a number",
                    fix="set gid_index in the site file",
                )
            )
            continue
        verdict, line = gids.judge(gids.read_sysfs(root, device, port), device, port, int(index_text))
        checks.append(
            Check(f"gid {name}", verdict, line, fix="set gid_index in the site file to a routable RoCE v2 entry")
        )
    return checks
