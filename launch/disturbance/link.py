"""A node's link as the kernel shapes it: the rate of the shaper on the fabric interface, and how
often it held traffic back, from `tc` run in the node's own network namespace.

A node whose egress is shaped below the others' is a rate-limited node: every collective waits
for it, and a fabric verdict taken across it measures that node, not the fabric. The signal
(`link_signal`) compares the nodes of one run: a node whose shaped rate is below LINK_SHARE_LIMIT
of the fastest node's is named. Read twice per node (as its sampler starts and as it ends: two
`tc` calls, a few ms); the text is kept in the record as tc printed it.

Shapers read: tbf (its rate; `tc -j` prints it in bytes/s) and htb (the rate of its default
class: the node's own link in launch.fleet.emulate; the classes of degraded pairs are the
locate's business). A node without a shaper reads "no shaper"; its negotiated link speed is
not read (ethtool/sysfs: future work).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

TC_TIMEOUT_S = 5
LINK_SHARE_LIMIT = 0.8  # a node shaped below 80 % of the fastest node's rate is named
_HTB_CLASS = re.compile(r"^class htb (\S+) .*?\brate (\d+(?:\.\d+)?)([KMGT]?)bit\b")
_UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


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
    """One node's link over its sampled span: the shaper at the end, and what it held back meanwhile
    (overlimits and drops between the first reading and the last)."""
    shapes = [shaper(r) for r in readings]
    if not shapes:
        return {"error": "not read"}
    last = shapes[-1]
    if "error" in last or last.get("kind") is None:
        return last
    first = shapes[0] if shapes[0].get("kind") == last["kind"] else {}
    return {
        **last,
        "held_back": max(0, last["overlimits"] - first.get("overlimits", 0)),
        "dropped": max(0, last["drops"] - first.get("drops", 0)),
    }


def link_signal(links: dict[str, dict], interface: str) -> dict:
    """The link signal of one run from each node's node_link: a node shaped below LINK_SHARE_LIMIT of
    the fastest node's rate is rate-limited."""
    rates = {node: link["rate_bit_s"] for node, link in links.items() if isinstance(link.get("rate_bit_s"), int)}
    if len(links) < 2:
        return {"verdict": "not measured", "why": "one node: nothing to compare its link with"}
    if not rates:
        why = sorted({link.get("error", "no shaper") for link in links.values()})
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
        parts.append(
            f"{node}'s egress on {figures['interface']} is shaped to {link['rate_bit_s'] / 1e6:g} Mbit/s "
            f"({link['kind']}), {link['rate_bit_s'] / fastest:.0%} of the fastest node's "
            f"{fastest / 1e6:g} Mbit/s; it held traffic back {link.get('held_back', 0)} times"
        )
    return "a rate-limited node: " + "; ".join(parts)
