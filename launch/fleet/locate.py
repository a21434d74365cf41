"""Which node or link of a Slurm allocation is slow: pairwise traffic as Slurm steps,
an outlier test, and the culprits named (`fabric-bench locate`).

Pattern: every pair of the allocation's nodes, each pair one Slurm step of two ranks
(one per node) running bench.allreduce at one message size: its point-to-point
ping-pong bandwidth (the pair's bandwidth, both directions in turn) and its 2-rank
allreduce busbw. Pairs are scheduled in rounds of disjoint pairs (the circle
method of a round-robin tournament), the steps of a round run at the same time:
N nodes cost N(N-1)/2 steps in N-1 rounds (N even; N rounds for N odd), as each
node takes part in one pair per round. That is the `all-pairs` pattern, the
default up to SCREEN_ABOVE (16) nodes. Above it (or with `--pattern screen`),
where N-1 rounds of a minute each is too long, a screen runs first: every node
with its ring neighbour and with the node N/2 away (3N/2 pairs, 3-4 rounds
whatever N, each node in 3 pairs), then all pairs only among the nodes of the
screen's slow pairs: O(1) rounds and O(N) steps for a healthy fleet, plus
k(k-1)/2 steps for k suspects. What the screen cannot see: a slow path between
two nodes that are neither neighbours nor opposite (a slow node or a node's own
link slows all of its pairs, so it is always seen); `all-pairs` sees every path.

Outlier test (a ratio to a robust reference, confirmed by re-measurement):
- reference R = the expected link rate when given (`--expect`), else the upper
  quartile of the pairs' bandwidths. Not the median: one slow node of N slows
  N-1 of the N(N-1)/2 pairs, half of them at N = 4, and a median would be one
  of them; the upper quartile stays a healthy pair while fewer than 3/4 are slow.
- a pair is slow when its bandwidth is below THRESHOLD (0.7) x R. Healthy pairs
  on the emulated links measure 0.9-1.0 of the shaped rate; a link at half its
  rate or a quarter (a bad NIC, a flapping lane) falls well below 0.7.
- every pair found slow is measured once more, and is slow only if both
  measurements are (its better one counts): one stall of a shared machine does
  not name a node.
- a node is slow when every pair it is in is slow (N >= 3): in a star topology
  that is the node itself or its own link, which pair traffic cannot tell apart;
  a slow pair not explained by a slow node is a slow link (the path between
  those two nodes). With N = 2 the one pair is its own upper quartile: only the
  expected rate (`--expect`) can show it slow, and then it is named as a link.

Results: DIR/locate.json (the pairs with their Slurm job and step ids, the test,
the verdict), DIR/heatmap.png and DIR/heatmap.html (pairwise bandwidth).
"""
from __future__ import annotations

import html
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from containers.untrusted import UntrustedInput, read_json
from launch.disturbance import quiet
from launch.fleet import slurm
from launch.errors import UsageError
from launch.fleet.node_names import node_name, node_names

THRESHOLD = 0.7
MEASURED_PATTERNS = ("all-pairs", "screen")   # what a locate.json records
PATTERNS = ("auto", *MEASURED_PATTERNS)
SCREEN_ABOVE = 16      # auto: all pairs up to this many nodes, the screen above
UPPER_QUANTILE = 0.75
DEFAULT_BYTES = 4 * 2**20
STEP_TIMEOUT_S = 180
_STEP_ID = re.compile(r"StepId=(\d+)\.(\d+)")
MAX_LOCATE_BYTES = 64 * 2**20  # all pairs of 256 nodes (the most the report shows) is ~16 MiB
_GRANTED = re.compile(r"Granted job allocation (\d+)")


@dataclass
class Pair:
    a: str
    b: str
    bandwidth_gbit_s: float | None  # point-to-point, largest message
    busbw_gbit_s: float | None      # 2-rank allreduce
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
        named = [f"slow node {n} (every pair with it is slow: the node or its own link)"
                 + (f"; but it was busy before the pairs ({self.busy[n]}): busy, perhaps, rather than slow; "
                    "measure again when it is quiet" if n in self.busy else "") for n in self.slow_nodes]
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


def judge(nodes: list[str], pairs: list[Pair], expected_gbit_s: float | None = None,
          threshold: float = THRESHOLD) -> Verdict:
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


# -- Slurm ---------------------------------------------------------------------------------
def _slurm(argv: list[str], timeout: float = 30) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"locate: `{' '.join(argv)}` failed: {exc}") from None
    if proc.returncode != 0:
        raise UsageError(f"locate: `{' '.join(argv)}` failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm host list, each checked by shape (they name folders and steps)."""
    return node_names(_slurm(["scontrol", "show", "hostnames", nodelist]).split(), "scontrol show hostnames")


def allocate(nodes: int | None, nodelist: str | None, exclude: str | None, minutes: int) -> str:
    """A job allocation (`salloc --no-shell`) for the steps; its id."""
    argv = ["salloc", "--no-shell", "--exclusive", f"--time={minutes}", "--job-name=fabric-bench-locate"]
    if nodes:
        argv.append(f"--nodes={nodes}")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    if exclude:
        argv.append(f"--exclude={exclude}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise UsageError("locate: no allocation within 120 s (salloc)") from None
    match = _GRANTED.search(proc.stderr + proc.stdout)
    if proc.returncode != 0 or not match:
        raise UsageError(f"locate: salloc failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return match.group(1)


def step_env(interface: str | None, image: str | None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "OMPI_MCA_btl": "self,tcp"}
    if interface:
        env.update(OMPI_MCA_btl_tcp_if_include=interface, OMPI_MCA_oob_tcp_if_include=interface)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if image:
        env["PMIX_MCA_gds"] = "hash"  # the image's PMIx client beside the host's server (launch.ranks.launchers)
    return env


def step_argv(job_id: str, pair: tuple[str, str], record_dir: Path, nbytes: int, image: str | None) -> list[str]:
    program = ["-m", "bench.allreduce", "--backend", "mpi", "--min-bytes", str(nbytes), "--max-bytes", str(nbytes),
               "--warmup", "1", "--iters", "5", "--max-seconds-per-size", "1.5", "--record-dir", str(record_dir)]
    ranks = ["apptainer", "exec", image, "python3", *program] if image else [sys.executable, *program]
    return ["srun", "-v", f"--jobid={job_id}", "--mpi=pmix", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
            f"--nodelist={','.join(pair)}", "--exact", "--kill-on-bad-exit=1", *ranks]


def read_pair(pair: tuple[str, str], record_dir: Path, log: str, job_id: str, returncode: int) -> Pair:
    step = _STEP_ID.search(log)
    result = Pair(pair[0], pair[1], None, None, job_id, f"{step.group(1)}.{step.group(2)}" if step else None)
    records = []
    for path in sorted(record_dir.glob("rank-*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("kind") == "allreduce":
                records.append(record)
    result.hosts = sorted({str(r.get("host")) for r in records})
    first = next((r for r in records if r.get("rank") == 0), None)
    try:
        if first is None:
            raise KeyError("rank 0")
        result.bandwidth_gbit_s = float(first["p2p"][-1]["bandwidth_gbit_s"])
        result.busbw_gbit_s = float(first["sizes"][-1]["busbw_gbit_s"])
    except (TypeError, KeyError, IndexError, ValueError):
        tail = [line for line in log.splitlines() if line.strip()][-1:] or [f"exit code {returncode}"]
        result.error = f"no measurement (exit code {returncode}): {tail[0][:300]}"
    return result


def run_round(job_id: str, pairs: list[tuple[str, str]], out: Path, tag: str, nbytes: int, image: str | None,
              interface: str | None) -> list[Pair]:
    """The round's steps at the same time (disjoint nodes), each waited for."""
    env = step_env(interface, image)
    started = []
    for pair in pairs:
        record_dir = out / "steps" / f"{tag}-{pair[0]}-{pair[1]}"
        record_dir.mkdir(parents=True, exist_ok=True)
        log = open(record_dir / "srun.log", "w+")
        proc = subprocess.Popen(step_argv(job_id, pair, record_dir, nbytes, image), env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        started.append((pair, record_dir, log, proc))
    measured = []
    for pair, record_dir, log, proc in started:
        try:
            code = proc.wait(timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log.seek(0)
        measured.append(read_pair(pair, record_dir, log.read(), job_id, code))
        log.close()
    return measured


def measure(job_id: str, nodes: list[str], out: Path, nbytes: int = DEFAULT_BYTES, image: str | None = None,
            interface: str | None = None, expected_gbit_s: float | None = None, echo=print,
            pattern: str = "all-pairs", run=None) -> tuple[list[Pair], Verdict, int, int]:
    """The pattern's pairs in rounds (the screen: then all pairs among its suspects), then the
    slow ones once more; (pairs, verdict, rounds run, steps run). `run(pairs, tag)` measures one
    round (default: Slurm steps, run_round)."""
    def slurm_round(round_pairs, tag):
        return run_round(job_id, round_pairs, out, tag, nbytes, image, interface)
    run = run or slurm_round
    pairs: dict[tuple[str, str], Pair] = {}
    done = steps = 0

    def run_rounds(schedule: list[list[tuple[str, str]]], stage: str, tag: str) -> None:
        nonlocal done, steps
        for k, round_pairs in enumerate(schedule):
            steps += len(round_pairs)
            for p in run(round_pairs, f"{tag}{k}"):
                pairs[(p.a, p.b)] = p
                echo(f"{stage} round {k + 1}/{len(schedule)}: {p.a}-{p.b} "
                     + (f"{p.bandwidth_gbit_s:.3f} Gbit/s{_step(p)}" if p.error is None else p.error))
            done += 1

    if pattern == "screen":
        run_rounds(disjoint_rounds(screen_pairs(nodes)), "screen", "s")
        screened = judge(nodes, list(pairs.values()), expected_gbit_s)
        suspects = sorted({node for pair in (*screened.slow_pairs, *screened.failed_pairs) for node in pair})
        echo(f"screen: {len(suspects)} suspect node(s){': ' + ','.join(suspects) if suspects else ''}")
        schedule = [[pair for pair in r if pair not in pairs] for r in rounds(suspects)]
        run_rounds([r for r in schedule if r], "suspects", "k")
    else:
        run_rounds(rounds(nodes), "all-pairs", "r")
    first = judge(nodes, list(pairs.values()), expected_gbit_s)
    for k, round_pairs in enumerate(disjoint_rounds(list(first.slow_pairs))):
        steps += len(round_pairs)
        for p in run(round_pairs, f"again{k}"):
            pairs[(p.a, p.b)].remeasured_gbit_s = p.bandwidth_gbit_s
            echo(f"again: {p.a}-{p.b} " + (f"{p.bandwidth_gbit_s:.3f} Gbit/s{_step(p)}"
                                            if p.bandwidth_gbit_s is not None else str(p.error)))
        done += 1
    ordered = [pairs[pair] for pair in sorted(pairs)]
    return ordered, judge(nodes, ordered, expected_gbit_s), done, steps


def _step(pair: Pair) -> str:
    return f" (step {pair.step_id})" if pair.step_id else ""


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
            isinstance(link, list) and len(link) == 2 and link[0] != link[1] for link in links):
        raise UsageError(f"{path}: not a locate result (slow_links, a list of [node, node] pairs)")
    for link in links:
        node_names(link, f"{path}: not a locate result (slow_links, a list of [node, node] pairs)")
    unknown = list(dict.fromkeys(n for n in [*nodes, *(n for link in links for n in link)]
                                 if cluster is not None and n not in cluster))
    if unknown:
        raise UsageError(f"{path}: names node {unknown[0]!r}, which is not in this cluster"
                         + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    measured: dict[frozenset, float] = {}
    for pair in pairs if isinstance(pairs, list) else []:
        try:
            a, b, bw = pair["a"], pair["b"], pair.get("best_gbit_s")
        except (TypeError, KeyError):
            continue  # pairs only order a tie: one that cannot be read is left out of it
        if (isinstance(a, str) and isinstance(b, str) and isinstance(bw, (int, float))
                and not isinstance(bw, bool) and 0 <= bw < 1e6):
            measured[frozenset((a, b))] = float(bw)
    return Named(nodes, [(a, b) for a, b in links], measured)


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


# -- heat-map --------------------------------------------------------------------------------
def matrix(nodes: list[str], pairs: list[Pair]) -> list[list[float | None]]:
    return _grid(nodes, [(p.a, p.b, p.best_gbit_s) for p in pairs])


def _grid(nodes: list[str], pairs: list[tuple[str, str, float | None]]) -> list[list[float | None]]:
    """Node x node bandwidth (symmetric; None where a pair was not measured)."""
    index = {n: i for i, n in enumerate(nodes)}
    grid: list[list[float | None]] = [[None] * len(nodes) for _ in nodes]
    for a, b, value in pairs:
        if a in index and b in index:
            grid[index[a]][index[b]] = grid[index[b]][index[a]] = value
    return grid


def heatmap_png(nodes: list[str], grid, reference: float, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = heatmap_figure(nodes, grid, reference)
    fig.savefig(path)
    plt.close(fig)


def heatmap_figure(nodes: list[str], grid, reference: float):
    """The pairwise bandwidth as a matplotlib figure (locate's heatmap.png, and the report's)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [[float("nan") if v is None else v / reference for v in row] for row in grid]
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * len(nodes), 1.0 + 0.6 * len(nodes)))
    image = ax.imshow(values, cmap="RdYlGn", vmin=0, vmax=1.1)
    ax.set_xticks(range(len(nodes)), nodes)
    ax.set_yticks(range(len(nodes)), nodes)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v is not None:
                ax.text(j, i, f"{v * 1000:.0f}", ha="center", va="center", fontsize=8)
    ax.set_title(f"pair bandwidth, Mbit/s\ncolour: share of the {reference * 1000:.0f} Mbit/s reference", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046).set_label("share of the reference", fontsize=8)
    fig.tight_layout()
    return fig


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
        pairs = [(name(p["a"]), name(p["b"]), gbit(p.get("best_gbit_s"))) for p in data["pairs"]][:256 * 255 // 2]
        reference = gbit(data["test"]["reference_gbit_s"]) or 0.0
        links = [(name(a), name(b)) for a, b in data.get("slow_links", [])]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: not a locate result (nodes, pairs, test.reference_gbit_s)") from None
    if reference <= 0:
        raise UsageError(f"{path}: not a locate result (no reference bandwidth)")
    pattern = data.get("pattern", "all-pairs")      # a locate.json from before the screen: all pairs
    if pattern not in MEASURED_PATTERNS:
        raise UsageError(f"{path}: not a locate result ({pattern!r:.40} is not a pattern)")
    stranger = next((n for n in [*slow_nodes, *(x for link in links for x in link)] if n not in nodes), None)
    if stranger is not None:
        raise UsageError(f"{path}: not a locate result (it names {stranger!r}, which is not one of its nodes)")
    return {"nodes": nodes, "grid": _grid(nodes, pairs), "reference_gbit_s": reference, "pattern": pattern,
            "slow_nodes": slow_nodes, "slow_links": links}


def heatmap_html(nodes: list[str], grid, verdict: Verdict, pairs: list[Pair]) -> str:
    def colour(v):
        if v is None:
            return "#ddd"
        share = max(0.0, min(1.0, v / verdict.reference_gbit_s))
        return f"hsl({int(120 * share)}, 70%, 75%)"

    head = "".join(f"<th>{html.escape(n)}</th>" for n in nodes)
    rows = []
    for n, row in zip(nodes, grid):
        cells = "".join(f'<td style="background:{colour(v)}">{"" if v is None else f"{v * 1000:.0f}"}</td>'
                        for v in row)
        rows.append(f"<tr><th>{html.escape(n)}</th>{cells}</tr>")
    table = "".join(
        f"<tr><td>{html.escape(p.a)}-{html.escape(p.b)}</td><td>{_num(p.bandwidth_gbit_s)}</td>"
        f"<td>{_num(p.remeasured_gbit_s)}</td><td>{_num(p.busbw_gbit_s)}</td>"
        f"<td>{html.escape(str(p.job_id))}.{html.escape(str(p.step_id))}</td>"
        f"<td>{html.escape(p.error or '')}</td></tr>" for p in pairs)
    named = "".join(f"<li>{html.escape(line)}</li>" for line in verdict.lines())
    return ("<!doctype html><meta charset='utf-8'><title>fabric-bench locate</title>"
            "<style>td,th{padding:4px 8px;border:1px solid #999;text-align:right}table{border-collapse:collapse}"
            "</style><h1>Pairwise bandwidth (Mbit/s)</h1>"
            f"<p>reference {verdict.reference_gbit_s * 1000:.0f} Mbit/s ({html.escape(verdict.reference_from)}); "
            f"a pair is slow below {verdict.threshold:g} x reference, confirmed by a second measurement.</p>"
            f"<ul>{named}</ul><table><tr><th></th>{head}</tr>{''.join(rows)}</table>"
            "<h2>Pairs</h2><table><tr><th>pair</th><th>p2p Gbit/s</th><th>again</th><th>allreduce busbw</th>"
            f"<th>step</th><th>error</th></tr>{table}</table>\n")


def _num(v) -> str:
    return "" if v is None else f"{v:.3f}"


def write(out: Path, nodes: list[str], pairs: list[Pair], verdict: Verdict, rounds_run: int, steps_run: int,
          job_id: str, nbytes: int, seconds: float, pattern: str = "all-pairs",
          quiet_check: list[dict] | None = None) -> dict:
    grid = matrix(nodes, pairs)
    heatmap_png(nodes, grid, verdict.reference_gbit_s, out / "heatmap.png")
    (out / "heatmap.html").write_text(heatmap_html(nodes, grid, verdict, pairs), encoding="utf-8")
    data = {"kind": "locate", "job_id": job_id, "nodes": nodes, "pattern": pattern, "bytes": nbytes,
            "rounds": rounds_run,
            "steps": steps_run, "seconds": seconds,
            "test": {"statistic": "point-to-point bandwidth of each pair (its better of two when re-measured)",
                     "reference_gbit_s": verdict.reference_gbit_s, "reference_from": verdict.reference_from,
                     "threshold": verdict.threshold},
            "pairs": [{**asdict(p), "best_gbit_s": p.best_gbit_s,
                       "share_of_reference": None if p.best_gbit_s is None
                       else p.best_gbit_s / verdict.reference_gbit_s} for p in pairs],
            "slow_nodes": verdict.slow_nodes, "slow_links": [list(x) for x in verdict.slow_links],
            "failed_pairs": [list(x) for x in verdict.failed_pairs],
            "quiet_check": quiet_check or [], "busy_nodes": verdict.busy,
            "median_gbit_s": statistics.median([p.best_gbit_s for p in pairs if p.best_gbit_s is not None] or [0])}
    (out / "locate.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def locate(out: Path, nodes: int | None = None, nodelist: str | None = None, exclude: str | None = None,
           nbytes: int = DEFAULT_BYTES, image: str | None = None, interface: str | None = None,
           expected_gbit_s: float | None = None, minutes: int = 20, echo=print, pattern: str = "auto",
           quiet_seconds: float = quiet.QUIET_SECONDS) -> dict:
    """Inside an allocation (SLURM_JOB_ID) its nodes; else a fresh allocation, cancelled afterwards.
    First every node's quiet check (one task each), so a busy node is told from a slow one."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    own = not os.environ.get("SLURM_JOB_ID")
    if own and not nodes and not nodelist:
        nodes = slurm.nodes_available(False, None)
        if exclude and nodes:
            nodes -= len(hostnames(exclude))
    job_id = allocate(nodes, nodelist, exclude, minutes) if own else os.environ["SLURM_JOB_ID"]
    try:
        fields = dict(t.split("=", 1) for t in _slurm(["scontrol", "show", "job", "-o", job_id]).split() if "=" in t)
        names = hostnames(fields.get("NodeList", ""))
        if len(names) < 2:
            raise UsageError(f"locate needs an allocation of >= 2 nodes, job {job_id} has {len(names)}")
        chosen = pattern_for(pattern, len(names))
        if chosen == "screen":
            plan = f"the screen's {len(screen_pairs(names))} pairs, then all pairs among its suspects"
        else:
            plan = f"{len(names) * (len(names) - 1) // 2} pairs in {len(rounds(names))} rounds"
        echo(f"locate: job {job_id}, nodes {','.join(names)}: {chosen}: {plan}")
        checked = quiet.check_nodes(["srun", f"--jobid={job_id}", f"--nodes={len(names)}", f"--ntasks={len(names)}",
                                     "--ntasks-per-node=1"], quiet_seconds) if quiet_seconds else []
        for line in quiet.busy_lines(checked):
            echo(f"locate: quiet check: {line}")
        pairs, verdict, done, steps = measure(job_id, names, out, nbytes, image, interface, expected_gbit_s, echo,
                                       pattern=chosen)
    finally:
        if own:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    verdict.busy = {r["host"]: "; ".join(r["causes"]) for r in checked if r.get("verdict") == "busy"}
    return write(out, names, pairs, verdict, done, steps, job_id, nbytes, time.monotonic() - started, chosen,
                 checked)
