"""RoCE's GID table: which entry a run addresses its peers by, and whether that entry is one
RoCE v2 can route.

An RDMA port on Ethernet (link_layer "Ethernet") has a GID table: one entry per IP address of its
net device and per RoCE version, in sysfs as

    /sys/class/infiniband/DEV/ports/PORT/link_layer             Ethernet | InfiniBand
    /sys/class/infiniband/DEV/ports/PORT/gids/N                 fe80:0000:...  (all zeros: unused)
    /sys/class/infiniband/DEV/ports/PORT/gid_attrs/types/N      "IB/RoCE v1" | "RoCE v2"
    /sys/class/infiniband/DEV/ports/PORT/gid_attrs/ndevs/N      the net device (eth2)

(`show_gids`, NVIDIA's script, prints the same table; `parse_show_gids` reads it). NCCL
(NCCL_IB_GID_INDEX) and UCX (UCX_IB_GID_INDEX) take the entry by index: an index on a v1 entry
runs RoCE v1 (not routable across subnets, no ECN over IP), on an empty one fails to connect, on
a link-local (fe80::) v2 entry reaches only the same L2 segment.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

V2 = "RoCE v2"
V1 = "IB/RoCE v1"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


@dataclass(frozen=True)
class Gid:
    device: str
    port: int
    index: int
    gid: str  # as sysfs writes it: eight groups of four hex digits
    type: Optional[str]  # V2 | V1 | None (no gid_attrs: InfiniBand, or an old kernel)
    netdev: Optional[str] = None

    @property
    def empty(self) -> bool:
        return self.gid.lower() == ZERO or not self.gid

    @property
    def ipv4(self) -> Optional[str]:
        """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d)."""
        try:
            address = ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None
        return str(address.ipv4_mapped) if address.ipv4_mapped else None

    @property
    def link_local(self) -> bool:
        try:
            return ipaddress.IPv6Address(self.gid).is_link_local
        except ValueError:
            return False

    def text(self) -> str:
        where = self.ipv4 or ("link-local" if self.link_local else self.gid)
        return f"{self.index} ({self.type or '?'}, {where}{f' on {self.netdev}' if self.netdev else ''})"


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except OSError:  # also what sysfs answers for an unused entry's attributes
        return None


def read_sysfs(root: Path, device: str, port: int) -> list[Gid]:
    """The port's non-empty GID entries under `root` (/ on a host)."""
    folder = root / "sys/class/infiniband" / device / "ports" / str(port)
    gids = []
    for path in sorted((folder / "gids").glob("*"), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        if not path.name.isdigit():
            continue
        gid = Gid(
            device,
            port,
            int(path.name),
            _read(path) or "",
            _read(folder / "gid_attrs/types" / path.name),
            _read(folder / "gid_attrs/ndevs" / path.name),
        )
        if not gid.empty:
            gids.append(gid)
    return gids


def link_layer(root: Path, device: str, port: int) -> Optional[str]:
    return _read(root / "sys/class/infiniband" / device / "ports" / str(port) / "link_layer")


_SHOW_GIDS_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+([0-9a-fA-F:]{39})\s+(\S*)\s*(v[12])\s+(\S+)\s*$")


def parse_show_gids(text: str) -> list[Gid]:
    """`show_gids` -> its rows (DEV PORT INDEX GID IPv4 VER DEV); VER v1/v2 as sysfs's types."""
    gids = []
    for line in text.splitlines():
        if row := _SHOW_GIDS_ROW.match(line.strip()):
            dev, port, index, gid, _ipv4, ver, netdev = row.groups()
            gids.append(Gid(dev, int(port), int(index), gid.lower(), V2 if ver == "v2" else V1, netdev))
    return gids


def judge(gids: list[Gid], device: str, port: int, index: int) -> tuple[str, str]:
    """(verdict, one line) for a run addressing `device` port `port` by GID `index`."""
    chosen = next((g for g in gids if g.index == index), None)
    v2 = [g for g in gids if g.type == V2]
    offer = ("RoCE v2 entries: " + ", ".join(g.text() for g in v2)) if v2 else "the port has no RoCE v2 entry"
    where = f"{device} port {port}"
    if chosen is None:
        return "fail", f"GID index {index} on {where} is empty; {offer}"
    if chosen.type == V1:
        return "fail", f"GID index {index} on {where} is RoCE v1 ({chosen.text()}), not v2; {offer}"
    if chosen.type != V2:
        return "unknown", f"GID index {index} on {where}: no RoCE type in sysfs ({chosen.text()})"
    if chosen.link_local:
        routable = [g for g in v2 if not g.link_local]
        better = f"; routable: {', '.join(g.text() for g in routable)}" if routable else ""
        return "warn", (
            f"GID index {index} on {where} is RoCE v2 but link-local ({chosen.gid}): peers on "
            f"other subnets cannot be reached{better}"
        )
    return "ok", f"GID index {index} on {where}: {chosen.text()}"
