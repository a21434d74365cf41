"""Planted faults of an emulated cluster: which node or link is degraded, and how.

Written on the command line as `--link` and `--slow` values (`fabric-bench emulate up`):

    --link 400mbit          every node's link (the cluster's rate)
    --link n3=200mbit       node 3's link to the switch, both directions
    --link n0-n2=100mbit    the path between nodes 0 and 2 only (each end's egress to the
                            other, an htb class of its own): a bad link, not a bad node
    --slow n1=100mbit       node 1 sends slower (its egress only): a slow node
    --slow n1               ... at a quarter of its link rate

The topology is a star (every node has one link to the switch), so a degraded
node link and a slow node look alike to traffic between pairs: both slow every
pair with that node. A pair's own fault is what slows one pair only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launch import shapes
from launch.fleet.emulate.links import parse_rate
from launch.errors import UsageError
from launch.shapes import LinkRate

_NODE = re.compile(r"^n(\d+)$")
_PAIR = re.compile(r"^n(\d+)-n(\d+)$")
SLOW_DEFAULT_FRACTION = 0.25  # `--slow nI` without a rate: a quarter of the node's link


@dataclass(frozen=True)
class Faults:
    node_rates: tuple[tuple[int, LinkRate], ...] = ()  # (node, bit/s): its link, both directions
    pair_rates: tuple[tuple[int, int, LinkRate], ...] = ()  # (node, node, bit/s): the path between them
    slow_nodes: tuple[tuple[int, LinkRate | None], ...] = ()  # (node, egress bit/s or None: a quarter)

    def __bool__(self) -> bool:
        return bool(self.node_rates or self.pair_rates or self.slow_nodes)

    def node_rate(self, i: int, default: LinkRate | None) -> LinkRate | None:
        return dict(self.node_rates).get(i, default)

    def egress_rate(self, i: int, link: LinkRate | None) -> LinkRate | None:
        slow = dict(self.slow_nodes)
        if i not in slow:
            return link
        if slow[i] is not None:
            return slow[i]
        if link is None:
            raise UsageError(f"--slow n{i} without a rate needs shaped links (--link RATE)")
        return shapes.link_rate(f"--slow n{i} (a quarter of its link)", int(link * SLOW_DEFAULT_FRACTION))

    def degraded_peers(self, i: int) -> list[tuple[int, LinkRate]]:
        """(peer, rate) of every degraded pair that node i is in."""
        return [(b if a == i else a, r) for a, b, r in self.pair_rates if i in (a, b)]

    def describe(self) -> list[str]:
        return (
            [f"n{i} link {r / 1e6:g} Mbit/s" for i, r in self.node_rates]
            + [f"n{a}-n{b} {r / 1e6:g} Mbit/s" for a, b, r in self.pair_rates]
            + [
                f"n{i} slow (egress {'1/4 of its link' if r is None else f'{r / 1e6:g} Mbit/s'})"
                for i, r in self.slow_nodes
            ]
        )

    @classmethod
    def from_state(cls, data) -> "Faults":
        if not isinstance(data, dict):
            return cls()
        return cls(
            tuple(tuple(x) for x in data.get("node_rates", ())),
            tuple(tuple(x) for x in data.get("pair_rates", ())),
            tuple(tuple(x) for x in data.get("slow_nodes", ())),
        )


def _node(text: str, nodes: int, option: str) -> int:
    match = _NODE.match(text)
    if not match or int(match.group(1)) >= nodes:
        raise UsageError(f"{option} {text!r}: name a node n0..n{nodes - 1}")
    return int(match.group(1))


def parse(links: list[str], slow: list[str], nodes: int) -> tuple[LinkRate | None, Faults]:
    """(the cluster's rate, its faults) from --link and --slow values."""
    rate: LinkRate | None = None
    node_rates: dict[int, LinkRate] = {}
    pair_rates: dict[tuple[int, int], LinkRate] = {}
    slow_nodes: dict[int, LinkRate | None] = {}
    for value in links:
        if "=" not in value:
            if rate is not None:
                raise UsageError(f"--link {value!r}: the cluster's rate is given twice")
            rate = parse_rate(value, "--link")
            continue
        where, text = value.split("=", 1)
        pair = _PAIR.match(where)
        if pair:
            a, b = sorted((_node(f"n{pair.group(1)}", nodes, "--link"), _node(f"n{pair.group(2)}", nodes, "--link")))
            if a == b:
                raise UsageError(f"--link {value!r}: a pair needs two different nodes")
            pair_rates[(a, b)] = parse_rate(text, f"--link {where}")
        else:
            node_rates[_node(where, nodes, "--link")] = parse_rate(text, f"--link {where}")
    for value in slow:
        where, _, text = value.partition("=")
        slow_nodes[_node(where, nodes, "--slow")] = parse_rate(text, f"--slow {where}") if text else None
    faults = Faults(
        tuple(sorted(node_rates.items())),
        tuple(sorted((a, b, r) for (a, b), r in pair_rates.items())),
        tuple(sorted(slow_nodes.items())),
    )
    if faults and rate is None and (pair_rates or any(r is None for r in slow_nodes.values())):
        raise UsageError("a degraded pair or a slow node without a rate needs the cluster's rate (--link RATE)")
    return rate, faults
