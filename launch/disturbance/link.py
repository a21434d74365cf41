"""A node's link as the kernel sees it: the rate of the shaper on the fabric interface and how often
it held traffic back (from `tc`), and the speed the interface negotiated (from its driver, the
ethtool ioctl), both read in the node's own network namespace.

A node whose egress is slower than the others' is a rate-limited node: every collective waits
for it, and a fabric verdict taken across it measures that node, not the fabric. The signal
(`link_signal`) compares the nodes of one run: a node whose rate (the lower of its shaper's rate
and its negotiated speed) is below LINK_SHARE_LIMIT of the fastest node's is named: a NIC that
came up at 25 of 100 Gb/s, a port shaped by someone else. Read twice per node (as its sampler
starts and as it ends: two `tc` calls and one ioctl, a few ms); tc's text is kept in the record
as tc printed it.

Shapers read: tbf (its rate; `tc -j` prints it in bytes/s) and htb (the rate of its default
class: the node's own link in launch.fleet.emulate; the classes of degraded pairs are the
locate's business). Speeds: what the driver reports (`ethtool IFACE`'s Speed); a driver that
reports none (virtio, a link that is down) leaves the speed out. An InfiniBand HCA without a
netdev has no speed here; its IPoIB interface reports the port's.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import re
import shutil
import socket
import struct
import subprocess

TC_TIMEOUT_S = 5
LINK_SHARE_LIMIT = 0.8  # a node shaped below 80 % of the fastest node's rate is named
_HTB_CLASS = re.compile(r"^class htb (\S+) .*?\brate (\d+(?:\.\d+)?)([KMGT]?)bit\b")
_UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
# linux/sockios.h, linux/ethtool.h: the legacy GSET request (struct ethtool_cmd, 44 bytes) still
# answers for drivers that only implement link_ksettings; speed is speed_hi << 16 | speed (Mb/s)
SIOCETHTOOL, ETHTOOL_GSET, ETHTOOL_CMD_BYTES = 0x8946, 0x1, 44
SPEED_OFFSET, SPEED_HI_OFFSET = 12, 28
SPEED_UNKNOWN = (0, 0xFFFF, 0xFFFFFFFF)


def negotiated_speed(interface: str) -> dict:
    """{"speed_mbit": N} as the interface's driver reports it in this network namespace, or
    {"speed_error": why}."""
    name = interface.encode()
    if not name or len(name) >= 16:
        return {"speed_error": f"{interface!r} is not an interface name"}
    request = array.array("B", struct.pack("I", ETHTOOL_GSET) + bytes(ETHTOOL_CMD_BYTES - 4))
    ifreq = struct.pack("16sP", name, request.buffer_info()[0])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    except OSError as exc:
        return {"speed_error": f"ethtool ioctl: {os.strerror(exc.errno) if exc.errno else exc}"}
    low = struct.unpack_from("H", request, SPEED_OFFSET)[0]
    high = struct.unpack_from("H", request, SPEED_HI_OFFSET)[0]
    speed = high << 16 | low
    return {"speed_error": "the driver reports no speed"} if speed in SPEED_UNKNOWN else {"speed_mbit": speed}


def read_link(interface: str) -> dict:
    """One reading of `interface`: read_tc's and negotiated_speed's."""
    return {**read_tc(interface), **negotiated_speed(interface)}


def read_tc(interface: str) -> dict:
    """What tc says of `interface` in this network namespace: {"qdisc": JSON text, "classes": text}
    or {"error": why}."""
    tc = shutil.which("tc") or next((p for p in ("/usr/sbin/tc", "/sbin/tc") if os.path.exists(p)), None)
    if tc is None:
        return {"error": "tc not found"}
    out = {}
    for key, argv in (
        ("qdisc", [tc, "-j", "-s", "qdisc", "show", "dev", interface]),
        ("classes", [tc, "-s", "class", "show", "dev", interface]),
    ):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=TC_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"error": f"{key}: {exc}"}
        if proc.returncode != 0:
            return {"error": (proc.stderr.strip().splitlines() or [f"tc exit {proc.returncode}"])[-1][:200]}
        out[key] = proc.stdout[:65536]
    return out


def shaper(reading: dict) -> dict:
    """{"kind", "rate_bit_s", "overlimits", "drops"} of the root shaper in one read_tc reading;
    {"kind": None} where there is none; {"error": why} where it cannot be read."""
    if "error" in reading:
        return {"error": str(reading["error"])}
    try:
        qdiscs = json.loads(reading.get("qdisc") or "[]")
    except ValueError:
        return {"error": "tc printed no JSON"}
    root = (
        next((q for q in qdiscs if isinstance(q, dict) and q.get("root")), None) if isinstance(qdiscs, list) else None
    )
    if root is None or root.get("kind") not in ("tbf", "htb"):
        return {"kind": None}
    counters = {key: root.get(key) if isinstance(root.get(key), int) else 0 for key in ("overlimits", "drops")}
    options = root["options"] if isinstance(root.get("options"), dict) else {}
    if root["kind"] == "tbf":
        rate = options.get("rate")
        return {"kind": "tbf", "rate_bit_s": 8 * rate, **counters} if isinstance(rate, int) else {"kind": None}
    default = str(options.get("default", "0x1"))
    try:
        default_minor = int(default, 16)
    except ValueError:
        default_minor = 1
    handle = str(root.get("handle", "1:")).rstrip(":")
    for line in str(reading.get("classes") or "").splitlines():
        m = _HTB_CLASS.match(line)
        if m and m.group(1) == f"{handle}:{default_minor:x}":
            return {"kind": "htb", "rate_bit_s": round(float(m.group(2)) * _UNIT[m.group(3)]), **counters}
    return {"kind": None}


def node_link(readings: list[dict]) -> dict:
    """One node's link over its sampled span: the shaper at the end and what it held back meanwhile
    (overlimits and drops between the first reading and the last); the negotiated speed at the
    end (`speed_bit_s`), where the driver reported one."""
    if not readings:
        return {"error": "not read"}
    speed = readings[-1].get("speed_mbit")
    speed_part: dict = {"speed_bit_s": speed * 10**6} if isinstance(speed, int) and speed > 0 else {}
    if "speed_error" in readings[-1]:
        speed_part = {"speed_error": str(readings[-1]["speed_error"])}
    shapes = [shaper(r) for r in readings]
    last = shapes[-1]
    if "error" in last or last.get("kind") is None:
        return {**last, **speed_part}
    first = shapes[0] if shapes[0].get("kind") == last["kind"] else {}
    return {
        **last,
        "held_back": max(0, last["overlimits"] - first.get("overlimits", 0)),
        "dropped": max(0, last["drops"] - first.get("drops", 0)),
        **speed_part,
    }


def node_rate(link: dict) -> int | None:
    """What limits a node's egress: the lower of its shaper's rate and its negotiated speed."""
    known = [link[key] for key in ("rate_bit_s", "speed_bit_s") if isinstance(link.get(key), int)]
    return min(known) if known else None


def link_signal(links: dict[str, dict], interface: str) -> dict:
    """The link signal of one run from each node's node_link: a node whose rate (node_rate) is below
    LINK_SHARE_LIMIT of the fastest node's is rate-limited."""
    rates = {node: rate for node, link in links.items() if (rate := node_rate(link)) is not None}
    if len(links) < 2:
        return {"verdict": "not measured", "why": "one node: nothing to compare its link with"}
    if not rates:
        why = sorted({link.get("error", "no shaper") for link in links.values()})
        why += sorted({f"link speed: {link['speed_error']}" for link in links.values() if "speed_error" in link})
        return {"verdict": "not measured", "why": "; ".join(why), "nodes": links}
    fastest = max(rates.values())
    limited = sorted(node for node, rate in rates.items() if rate < LINK_SHARE_LIMIT * fastest)
    return {
        "interface": interface,
        "nodes": links,
        "fastest_bit_s": fastest,
        "limit_share": LINK_SHARE_LIMIT,
        "rate_limited": limited,
        "verdict": "disturbed" if limited else "clean",
    }


def link_words(figures: dict) -> str:
    fastest = figures["fastest_bit_s"]
    parts = []
    for node in figures["rate_limited"]:
        link = figures["nodes"][node]
        rate = node_rate(link) or 0
        if rate == link.get("rate_bit_s"):
            how = f"is shaped to {rate / 1e6:g} Mbit/s ({link['kind']})"
            held = f"; it held traffic back {link.get('held_back', 0)} times"
        else:
            how, held = f"negotiated {rate / 1e6:g} Mbit/s", ""
        parts.append(
            f"{node}'s egress on {figures['interface']} {how}, {rate / fastest:.0%} of the fastest node's "
            f"{fastest / 1e6:g} Mbit/s{held}"
        )
    return "a rate-limited node: " + "; ".join(parts)
