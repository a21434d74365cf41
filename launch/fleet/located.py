"""What a sweep leaves out after `fabric-bench locate` (`sweep --exclude-located FILE`).

A slow node goes whole. A slow link is the path between two nodes: leaving out
either end takes it out of every point, so one end of each link goes, chosen so
the fewest nodes go (a minimum vertex cover of the links not already covered by
a slow node: exact by increasing size over the links' ends, greedy above
EXACT_UP_TO ends). Among covers of the same size the tie-break is fixed: the ends
whose other pairs measured slowest first (locate.json's pair bandwidths, the
named links themselves not counted; ends without a measurement last), then by
name (n2 before n10). Each node left out carries the reason a user reads.

Imports launch.fleet.locate (the file's one reader) and nothing of the sweep.
"""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from launch.fleet import locate

EXACT_UP_TO = 20  # ends of uncovered links searched exactly; beyond, the greedy cover


@dataclass
class LeftOut:
    source: Path
    nodes: list[str] = field(default_factory=list)  # in name order
    why: dict[str, str] = field(default_factory=dict)  # node -> the reason, as a user reads it
    choice: dict[str, str] = field(default_factory=dict)  # node -> why this end of its link

    @property
    def node_list(self) -> str:
        """The Slurm node list (srun/sbatch --exclude)."""
        return ",".join(self.nodes)

    def lines(self) -> list[str]:
        if not self.nodes:
            return [f"--exclude-located {self.source}: nothing to leave out (no slow node or link named)"]
        return [
            f"leaving out {node} (named in {self.source}): {self.why[node]}"
            + (f"; {self.choice[node]}" if node in self.choice else "")
            for node in self.nodes
        ]

    def summary(self) -> str:
        """One clause for a refusal: 'n3 (one end of slow link n1-n3)'."""
        return ", ".join(f"{node} ({self.why[node]})" for node in self.nodes)


def name_order(node: str) -> tuple:
    """n2 before n10: digits compared as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", node) if part)


def cover(links: list[tuple[str, str]], rank: dict[str, tuple] | None = None) -> list[str]:
    """The fewest nodes that touch every link; ties to the best-ranked nodes (rank: lower first,
    default by name)."""
    rank = rank or {}
    ends = sorted({node for link in links for node in link}, key=lambda n: (rank.get(n, ()), name_order(n)))
    if not links:
        return []
    if len(ends) <= EXACT_UP_TO:
        for size in range(1, len(ends) + 1):
            for chosen in itertools.combinations(ends, size):  # in rank order: the first found wins ties
                picked = set(chosen)
                if all(picked & set(link) for link in links):
                    return sorted(chosen, key=name_order)
    left, chosen_list = list(links), []
    while left:  # greedy: the end of most remaining links, ties by rank
        best = max(ends, key=lambda n: (sum(n in link for link in left), -ends.index(n)))
        chosen_list.append(best)
        left = [link for link in left if best not in link]
    return sorted(chosen_list, key=name_order)


def leave_out(path: Path, cluster: list[str] | None = None) -> LeftOut:
    """The nodes to leave out for what a locate.json names, each with its reason; `cluster`:
    this cluster's node names, where Slurm can say (a name outside it is refused)."""
    named = locate.named(path, cluster)
    out = LeftOut(Path(path))
    for node in named.slow_nodes:
        out.why[node] = "slow node (every pair with it is slow)"
    links = [link for link in named.slow_links if not set(link) & set(named.slow_nodes)]
    rank = {node: weakness(node, named.pair_gbit_s, links) for link in links for node in link}
    chosen = cover(links, rank)
    for node in chosen:
        mine = [link for link in links if node in link]
        why = f"one end of slow link{'s' if len(mine) > 1 else ''} {', '.join(f'{a}-{b}' for a, b in mine)}"
        if len(mine) == 1 and not set(mine[0]) - {node} <= set(chosen):
            out.choice[node] = tie_break(node, mine[0], rank)
        out.why[node] = why
    out.nodes = sorted(out.why, key=name_order)
    return out


def weakness(node: str, pair_gbit_s: dict[frozenset, float], links: list[tuple[str, str]]) -> tuple:
    """Sort key of an end: the mean bandwidth of its pairs other than the named links (lower: weaker,
    picked first); an end without such a measurement after every measured one."""
    named = {frozenset(link) for link in links}
    values = [bw for pair, bw in pair_gbit_s.items() if node in pair and pair not in named]
    return (0, statistics.fmean(values)) if values else (1, 0.0)


def tie_break(node: str, link: tuple[str, str], rank: dict[str, tuple]) -> str:
    """Why this end of its one link and not the other."""
    other = link[1] if link[0] == node else link[0]
    mine, theirs = rank.get(node, (1, 0.0)), rank.get(other, (1, 0.0))
    if mine[0] == 0 and theirs[0] == 0 and mine[1] < theirs[1]:
        return f"its other pairs measured slower than {other}'s ({mine[1]:.3g} vs {theirs[1]:.3g} Gbit/s)"
    if mine[0] == 0 and theirs[0] == 1:
        return f"its other pairs were measured, {other}'s were not"
    return f"{other} would do as well: the first by name goes"
