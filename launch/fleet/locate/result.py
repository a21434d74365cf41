"""locate.json: written with the heat-maps beside it (write), and read back validated, perhaps
from another site (named, named_nodes for a sweep's exclusions; read_locate for the report)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from containers.untrusted import UntrustedInput, read_json
from launch.errors import UsageError
from launch.fleet.locate.heatmap import bandwidth_grid, heatmap_html, heatmap_png, matrix
from launch.fleet.locate.pairs import MEASURED_PATTERNS, Pair, Verdict
from launch.fleet.node_names import node_name, node_names

MAX_LOCATE_BYTES = 64 * 2**20  # all pairs of 256 nodes (the most the report shows) is ~16 MiB


def write(
    out: Path,
    nodes: list[str],
    pairs: list[Pair],
    verdict: Verdict,
    rounds_run: int,
    steps_run: int,
    job_id: str,
    nbytes: int,
    seconds: float,
    pattern: str = "all-pairs",
    quiet_check: list[dict] | None = None,
) -> dict:
    shown = matrix(nodes, pairs)
    heatmap_png(nodes, shown, verdict.reference_gbit_s, out / "heatmap.png")
    (out / "heatmap.html").write_text(heatmap_html(nodes, shown, verdict, pairs), encoding="utf-8")
    data = {
        "kind": "locate",
        "job_id": job_id,
        "nodes": nodes,
        "pattern": pattern,
        "bytes": nbytes,
        "rounds": rounds_run,
        "steps": steps_run,
        "seconds": seconds,
        "test": {
            "statistic": "point-to-point bandwidth of each pair (its better of two when re-measured)",
            "reference_gbit_s": verdict.reference_gbit_s,
            "reference_from": verdict.reference_from,
            "threshold": verdict.threshold,
        },
        "pairs": [
            {
                **asdict(p),
                "best_gbit_s": p.best_gbit_s,
                "share_of_reference": None if p.best_gbit_s is None else p.best_gbit_s / verdict.reference_gbit_s,
            }
            for p in pairs
        ],
        "slow_nodes": verdict.slow_nodes,
        "slow_links": [list(x) for x in verdict.slow_links],
        "failed_pairs": [list(x) for x in verdict.failed_pairs],
        "quiet_check": quiet_check or [],
        "busy_nodes": verdict.busy,
        "median_gbit_s": statistics.median([p.best_gbit_s for p in pairs if p.best_gbit_s is not None] or [0]),
    }
    (out / "locate.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


@dataclass
class Named:
    """What a locate.json names, validated (another site's file: names and bandwidths only)."""

    slow_nodes: list[str]
    slow_links: list[tuple[str, str]]
    pair_gbit_s: dict[frozenset, float]  # each measured pair's bandwidth (its better measurement)


def named(path: Path, cluster: list[str] | None = None) -> Named:
    """The slow nodes and links a locate.json names, and its pairs' bandwidths where it has them;
    with `cluster` (its node names), a name that is not one of them is refused."""
    data = _load(path)
    nodes = _slow_nodes(data, path)
    links, pairs = data.get("slow_links", []), data.get("pairs", [])
    if not isinstance(links, list) or not all(
        isinstance(link, list) and len(link) == 2 and link[0] != link[1] for link in links
    ):
        raise UsageError(f"{path}: not a locate result (slow_links, a list of [node, node] pairs)")
    for link in links:
        node_names(link, f"{path}: not a locate result (slow_links, a list of [node, node] pairs)")
    unknown = list(
        dict.fromkeys(
            n for n in [*nodes, *(n for link in links for n in link)] if cluster is not None and n not in cluster
        )
    )
    if unknown:
        raise UsageError(
            f"{path}: names node {unknown[0]!r}, which is not in this cluster"
            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
        )
    pair_gbit_s: dict[frozenset, float] = {}
    for pair in pairs if isinstance(pairs, list) else []:
        try:
            a, b, bw = pair["a"], pair["b"], pair.get("best_gbit_s")
        except (TypeError, KeyError):
            continue  # pairs only order a tie: one that cannot be read is left out of it
        if (
            isinstance(a, str)
            and isinstance(b, str)
            and isinstance(bw, (int, float))
            and not isinstance(bw, bool)
            and 0 <= bw < 1e6
        ):
            pair_gbit_s[frozenset((a, b))] = float(bw)
    return Named(nodes, [(a, b) for a, b in links], pair_gbit_s)


def named_nodes(path: Path, cluster: list[str] | None = None) -> list[str]:
    """The slow nodes a locate.json names (another site's file: validated, names only)."""
    return named(path, cluster).slow_nodes


def _load(path: Path):
    try:
        return read_json(path, MAX_LOCATE_BYTES, "locate result")
    except UntrustedInput as exc:
        raise UsageError(f"{path}: not a locate result: {exc.reason.removeprefix('is ')}") from None


def _slow_nodes(data, path: Path) -> list[str]:
    if not isinstance(data, dict) or data.get("kind") != "locate":
        raise UsageError(f"{path}: not a locate result (kind 'locate' with slow_nodes, a list of node names)")
    return node_names(data.get("slow_nodes"), f"{path}: not a locate result: slow_nodes")


def read_locate(path: Path) -> dict:
    """A locate.json (perhaps another site's): validated, and only what the report shows kept:
    the nodes, each pair's bandwidth, the reference, the named nodes and links."""
    data = _load(path)
    slow_nodes = _slow_nodes(data, path)  # the kind checked there too

    def name(value) -> str:
        return node_name(value, f"{path}: not a locate result")

    def gbit(value) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
            raise UsageError(f"{path}: not a locate result ({value!r:.40} is not a bandwidth)")
        return float(value)

    try:
        nodes = node_names(data["nodes"], f"{path}: not a locate result")[:256]
        pairs = [(name(p["a"]), name(p["b"]), gbit(p.get("best_gbit_s"))) for p in data["pairs"]][: 256 * 255 // 2]
        reference = gbit(data["test"]["reference_gbit_s"]) or 0.0
        links = [(name(a), name(b)) for a, b in data.get("slow_links", [])]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: not a locate result (nodes, pairs, test.reference_gbit_s)") from None
    if reference <= 0:
        raise UsageError(f"{path}: not a locate result (no reference bandwidth)")
    pattern = data.get("pattern", "all-pairs")  # a locate.json from before the screen: all pairs
    if pattern not in MEASURED_PATTERNS:
        raise UsageError(f"{path}: not a locate result ({pattern!r:.40} is not a pattern)")
    stranger = next((n for n in [*slow_nodes, *(x for link in links for x in link)] if n not in nodes), None)
    if stranger is not None:
        raise UsageError(f"{path}: not a locate result (it names {stranger!r}, which is not one of its nodes)")
    return {
        "nodes": nodes,
        "grid": bandwidth_grid(nodes, pairs),
        "reference_gbit_s": reference,
        "pattern": pattern,
        "slow_nodes": slow_nodes,
        "slow_links": links,
    }
