"""Which pairs locate measures and when (the schedule: all pairs in rounds of disjoint pairs, or
the screen), and the outlier test that names slow nodes and links (see the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

from launch.errors import UsageError

THRESHOLD = 0.7
MEASURED_PATTERNS = ("all-pairs", "screen")  # what a locate.json records
PATTERNS = ("auto", *MEASURED_PATTERNS)
SCREEN_ABOVE = 16  # auto: all pairs up to this many nodes, the screen above
UPPER_QUANTILE = 0.75


@dataclass
class Pair:
    a: str
    b: str
    bandwidth_gbit_s: float | None  # point-to-point, largest message
    busbw_gbit_s: float | None  # 2-rank allreduce
    job_id: str | None = None
    step_id: str | None = None
    hosts: list[str] = field(default_factory=list)  # where the two ranks ran (their hostnames)
    error: str | None = None
    remeasured_gbit_s: float | None = None

    @property
    def best_gbit_s(self) -> float | None:
        values = [v for v in (self.bandwidth_gbit_s, self.remeasured_gbit_s) if v is not None]
        return max(values) if values else None


@dataclass
class Verdict:
    reference_gbit_s: float
    reference_from: str
    threshold: float
    slow_pairs: list[tuple[str, str]]
    slow_nodes: list[str]
    slow_links: list[tuple[str, str]]
    failed_pairs: list[tuple[str, str]]
    busy: dict[str, str] = field(default_factory=dict)  # node -> what kept it busy at the quiet check

    def lines(self) -> list[str]:
        named = [
            f"slow node {n} (every pair with it is slow: the node or its own link)"
            + (
                f"; but it was busy before the pairs ({self.busy[n]}): busy, perhaps, rather than slow; "
                "measure again when it is quiet"
                if n in self.busy
                else ""
            )
            for n in self.slow_nodes
        ]
        named += [f"slow link {a}-{b}" for a, b in self.slow_links]
        named += [f"pair {a}-{b} failed to run" for a, b in self.failed_pairs]
        return named or ["nothing named: every pair within the test"]


def rounds(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """All pairs in rounds of disjoint pairs (circle method): N-1 rounds for even N, N for odd."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])  # None: the bye
    n = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(n - 1):
        pairs = [(ring[k], ring[n - 1 - k]) for k in range(n // 2)]
        out.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def screen_pairs(nodes: list[str]) -> list[tuple[str, str]]:
    """Each node with its ring neighbour and with the node N/2 away (each pair once)."""
    n = len(nodes)
    found = {tuple(sorted((nodes[i], nodes[(i + 1) % n]))) for i in range(n)}
    found |= {tuple(sorted((nodes[i], nodes[i + n // 2]))) for i in range(n // 2)}
    return sorted((a, b) for a, b in found if a != b)


def pattern_for(pattern: str, nodes: int) -> str:
    """The pattern `auto` stands for at this many nodes."""
    if pattern not in PATTERNS:
        raise UsageError(f"unknown pattern {pattern!r}; choose from {', '.join(PATTERNS)}")
    if pattern == "auto":
        return "screen" if nodes > SCREEN_ABOVE else "all-pairs"
    return pattern


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def judge(
    nodes: list[str], pairs: list[Pair], expected_gbit_s: float | None = None, threshold: float = THRESHOLD
) -> Verdict:
    measured = {(p.a, p.b): p.best_gbit_s for p in pairs if p.best_gbit_s is not None}
    failed = [(p.a, p.b) for p in pairs if p.best_gbit_s is None]
    if expected_gbit_s:
        reference, source = expected_gbit_s, "expected link rate"
    elif measured:
        reference, source = quantile(list(measured.values()), UPPER_QUANTILE), "upper quartile of the pairs"
    else:
        raise UsageError("locate: no pair was measured; see the steps' logs")
    slow = sorted(pair for pair, bw in measured.items() if bw < threshold * reference)
    slow_nodes = []
    if len(nodes) >= 3:
        for node in nodes:
            mine = [pair for pair in measured if node in pair]
            if mine and all(pair in slow for pair in mine):
                slow_nodes.append(node)
    links = [pair for pair in slow if not set(pair) & set(slow_nodes)]
    return Verdict(reference, source, threshold, slow, slow_nodes, links, failed)


def disjoint_rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Greedy: each round takes pairs whose nodes are not busy in it yet."""
    left, out = list(pairs), []
    while left:
        busy: set[str] = set()
        this: list[tuple[str, str]] = []
        for pair in list(left):
            if not set(pair) & busy:
                this.append(pair)
                busy |= set(pair)
                left.remove(pair)
        out.append(this)
    return out
