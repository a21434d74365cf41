"""What a sweep leaves out after `fabric-bench locate` (`sweep --exclude-located FILE`).

A slow node goes whole. A slow link is the path between two nodes: leaving out
either end takes it out of every point, so one end of each link goes, chosen so
the fewest nodes go (a minimum vertex cover of the links not already covered by
a slow node: exact by increasing size over the links' ends while at most EXACT_SUBSETS
subsets are tried, greedy above EXACT_UP_TO ends or beyond those sizes). Among covers of
the same size the tie-break is fixed: the ends whose other pairs measured slowest first
(locate.json's pair bandwidths, the named links themselves not counted; ends without a
measurement last), then by name (n2 before n10). Each node left out carries the reason a user reads.

A locate.json may be another site's: its names are shaped (launch.fleet.node_names, checked by
launch.fleet.locate), and what it names is bounded: at most MAX_NAMED slow nodes and MAX_NAMED
slow links as written (locate names each once; a real cluster's slow set is a few nodes or
links, and locate's own heat-map stops at 256 nodes), a link written twice (n1-n3, n3-n1)
counted once, and every step here is linear in what it names but the exact cover's search,
which examines at most EXACT_SUBSETS subsets (K20's 190 links took 15 s before it).

Imports launch.fleet.locate (the file's one reader) and nothing of the sweep.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from launch.errors import UsageError
from launch.fleet import locate

EXACT_UP_TO = 20  # ends of uncovered links searched exactly; beyond, the greedy cover
EXACT_SUBSETS = 2**16  # and the exact search's sizes while their subsets number at most this many
MAX_NAMED = 4096  # slow nodes, and slow links, one locate.json may name (entries as written)


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
    position = {node: i for i, node in enumerate(ends)}
    if len(ends) <= EXACT_UP_TO:
        masks = {1 << position[a] | 1 << position[b] for a, b in links}
        tried = 0
        for size in range(1, len(ends) + 1):
            tried += math.comb(len(ends), size)
            if tried > EXACT_SUBSETS:
                break
            for chosen in itertools.combinations(range(len(ends)), size):  # in rank order: the first found wins ties
                picked = sum(1 << i for i in chosen)
                if all(picked & mask for mask in masks):
                    return sorted((ends[i] for i in chosen), key=name_order)
    # greedy: the end of most remaining links, ties by rank (a heap of (links left, rank), refreshed when popped)
    touching: dict[str, list[int]] = defaultdict(list)
    for i, link in enumerate(links):
        for node in link:
            touching[node].append(i)
    left = {node: len(touching[node]) for node in ends}
    heap = [(-left[node], position[node], node) for node in ends]
    heapq.heapify(heap)
    covered: set[int] = set()
    chosen_list = []
    while len(covered) < len(links):
        count, at, node = heapq.heappop(heap)
        if -count != left[node]:
            heapq.heappush(heap, (-left[node], at, node))
            continue
        chosen_list.append(node)
        for i in touching[node]:
            if i not in covered:
                covered.add(i)
                for end in links[i]:
                    left[end] -= 1
    return sorted(chosen_list, key=name_order)


def leave_out(path: Path, cluster: list[str] | None = None) -> LeftOut:
    """The nodes to leave out for what a locate.json names, each with its reason; `cluster`:
    this cluster's node names, where Slurm can say (a name outside it is refused)."""
    named = locate.named(path)  # names shaped; their number and the cluster checked here
    for what, entries in (("slow nodes", named.slow_nodes), ("slow links", named.slow_links)):
        if len(entries) > MAX_NAMED:
            raise UsageError(f"{path}: names {len(entries)} {what}, more than any locate finds (at most {MAX_NAMED})")
    slow_nodes = list(dict.fromkeys(named.slow_nodes))
    written: dict[frozenset, tuple[str, str]] = {}  # each link once (n1-n3 and n3-n1 are one), as first written
    for link in named.slow_links:
        written.setdefault(frozenset(link), link)
    gone = set(slow_nodes)
    links = [link for link in written.values() if not gone & set(link)]
    if cluster is not None:
        known = set(cluster)
        unknown = [
            n for n in dict.fromkeys([*slow_nodes, *(n for link in written.values() for n in link)]) if n not in known
        ]
        if unknown:
            raise UsageError(
                f"{path}: names node {unknown[0]!r}, which is not in this cluster"
                + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            )
    out = LeftOut(Path(path))
    for node in slow_nodes:
        out.why[node] = "slow node (every pair with it is slow)"
    rank = weakness({node for link in links for node in link}, named.pair_gbit_s, links)
    chosen = cover(links, rank)
    picked = set(chosen)
    mine: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for link in links:
        for node in set(link) & picked:
            mine[node].append(link)
    for node in chosen:
        why = f"one end of slow link{'s' if len(mine[node]) > 1 else ''} {', '.join(f'{a}-{b}' for a, b in mine[node])}"
        if len(mine[node]) == 1 and not set(mine[node][0]) - {node} <= picked:
            out.choice[node] = tie_break(node, mine[node][0], rank)
        out.why[node] = why
    out.nodes = sorted(out.why, key=name_order)
    return out


def weakness(ends: set[str], pair_gbit_s: dict[frozenset, float], links: list[tuple[str, str]]) -> dict[str, tuple]:
    """Each end's sort key: the mean bandwidth of its pairs other than the named links (lower: weaker,
    picked first); an end without such a measurement after every measured one. One pass over the pairs."""
    named = {frozenset(link) for link in links}
    measured: dict[str, list[float]] = defaultdict(list)
    for pair, bw in pair_gbit_s.items():
        if pair not in named:
            for node in pair & ends:
                measured[node].append(bw)
    return {node: (0, statistics.fmean(measured[node])) if measured[node] else (1, 0.0) for node in ends}


def tie_break(node: str, link: tuple[str, str], rank: dict[str, tuple]) -> str:
    """Why this end of its one link and not the other."""
    other = link[1] if link[0] == node else link[0]
    mine, theirs = rank.get(node, (1, 0.0)), rank.get(other, (1, 0.0))
    if mine[0] == 0 and theirs[0] == 0 and mine[1] < theirs[1]:
        return f"its other pairs measured slower than {other}'s ({mine[1]:.3g} vs {theirs[1]:.3g} Gbit/s)"
    if mine[0] == 0 and theirs[0] == 1:
        return f"its other pairs were measured, {other}'s were not"
    return f"{other} would do as well: the first by name goes"
