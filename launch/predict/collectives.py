"""Allreduce cost on a cluster (launch.predict.cluster): the algorithms NCCL, Gloo and MPI
use, the one each library would choose, and each one's time from the levels it crosses.

S bytes over N nodes of g GPUs (p = N g ranks); B_gpu the achievable intra-node bandwidth
per GPU, B_node the achievable network bandwidth per node (rails x rate x fraction),
a_i / a_n the intra / inter per-hop latencies:

  ring (NCCL, multi-channel)  2(p-1)/p S / min(B_gpu, B_node) + 2(p-N) a_i + 2(N-1) a_n
                              (NCCL's channels spread the ring's node crossings over the rails)
  ring (Gloo, one ring)       as above with B_node / rails: one connection, one NIC
  tree (NCCL double binary)   S / (0.45 c(S) min(B_gpu, B_node)) + 2((g-1) a_i + ceil(log2 N) a_n)
                              (NCCL's own tree factors: 0.9 of busbw, algbw = busbw / 2, c(S) its
                              correction for medium sizes)
  hierarchical ring           2(g-1)/g S / B_gpu + 2(N-1)/N S / B_node + 2(g-1) a_i + 2(N-1) a_n
                              (intra reduce-scatter, inter ring, intra all-gather, one after another)
  halving-doubling            2(1-1/g) S / B_gpu + 2(1-g/p) S / B_node
                              + 2 ceil(log2 g) a_i + 2 ceil(log2 N) a_n
                              (Rabenseifner; partners at distance 1, 2, 4, ... so the first
                              log2 g steps stay in the node)

Which one runs (`auto`): NCCL picks the algorithm of least time in its own tuning model
(src/graph/tuning.cc: per algorithm a base latency plus hardware latency per step on
NVLink / PCI / network, bus bandwidth converted to algorithm bandwidth, the tree's 0.9
and medium-size correction, the ring's x1.9 latency plateau beyond p/16 x 64 KiB across
nodes); that model is evaluated here with its published constants for the Simple protocol
(NCCL 2.7-2.8 tables) and the cluster's bandwidths. NVLS, CollNet/SHARP and PAT (NCCL >= 2.17
on NVSwitch / SHARP fabrics) are not modelled: where they run, NCCL is faster than predicted.
Gloo's allreduce (torch.distributed, Horovod's Gloo ops) is a ring. Open MPI's tuned
allreduce for large messages is taken as halving-doubling (Rabenseifner); its decision
tables vary by version. A run's NCCL log can name the algorithm (`algorithm_from_nccl_log`).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from launch.errors import UsageError
from launch.predict.cluster import Cluster

# NCCL's tuning model (Simple protocol), microseconds: base latency and per-step hardware latency
NCCL_BASE_LAT_US = {"tree": 0.0, "ring": 8.4}
NCCL_HW_LAT_US = {
    "nvlink": {"tree": 28.0, "ring": 3.4},
    "pci": {"tree": 28.0, "ring": 5.7},
    "net": {"tree": 50.0, "ring": 9.6},
}
# The tree's correction for medium sizes, Simple protocol, by log2(bytes / 64) = 0 .. 21
NCCL_TREE_CORRECTION = (
    0.9,
    0.9,
    0.9,
    0.9,
    0.9,
    0.9,
    0.9,
    0.8,
    0.7,
    0.6,
    0.6,
    0.5,
    0.5,
    0.5,
    0.5,
    0.5,
    0.5,
    0.6,
    0.6,
    0.7,
    0.8,
    0.9,
)
TREE_BW_FACTOR = 0.9
RING_PLATEAU = 1.9


@dataclass(frozen=True)
class Corner:
    """One setting of the uncertain inputs: fractions of nominal bandwidth and latencies (us)."""

    name: str
    intra_fraction: float
    inter_fraction: float
    intra_latency_us: float
    inter_latency_us: float


def corners(c: Cluster) -> dict[str, Corner]:
    """fast (high fractions, low latencies), mid (midpoints), slow (low fractions, high latencies)."""
    i, n = c.intra, c.inter
    mid = lambda r: (r[0] + r[1]) / 2  # noqa: E731
    return {
        "fast": Corner("fast", i.fraction[1], n.fraction[1], i.latency_us[0], n.latency_us[0]),
        "mid": Corner("mid", mid(i.fraction), mid(n.fraction), mid(i.latency_us), mid(n.latency_us)),
        "slow": Corner("slow", i.fraction[0], n.fraction[0], i.latency_us[1], n.latency_us[1]),
    }


def _log2i(n: int) -> int:
    return max(0, int(math.floor(math.log2(n)))) if n >= 1 else 0


def _clog2(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def _bandwidths(c: Cluster, k: Corner) -> tuple[float, float]:
    """Achievable bytes/s: per GPU inside the node, per node on the network."""
    return (c.intra.gbit_s * 1e9 / 8 * k.intra_fraction, c.inter.node_gbit_s * 1e9 / 8 * k.inter_fraction)


def algorithm_time_s(algo: str, c: Cluster, nodes: int, gpus: int, nbytes: float, k: Corner) -> float:
    """One allreduce of nbytes by `algo` over `nodes` nodes of `gpus` GPUs each."""
    p = nodes * gpus
    if p <= 1 or nbytes <= 0:
        return 0.0
    b_gpu, b_node = _bandwidths(c, k)
    a_i, a_n = k.intra_latency_us * 1e-6, k.inter_latency_us * 1e-6
    if nodes == 1:  # one level: the node's own ring (every library keeps it on NVLink / PCIe)
        return 2 * (p - 1) / p * nbytes / b_gpu + 2 * (p - 1) * a_i
    if algo == "ring":
        net = b_node / c.inter.rails if c.library == "gloo" else b_node
        return 2 * (p - 1) / p * nbytes / min(b_gpu, net) + 2 * (p - nodes) * a_i + 2 * (nodes - 1) * a_n
    if algo == "tree":
        factor = tree_correction(nbytes)
        return nbytes / (0.5 * TREE_BW_FACTOR * factor * min(b_gpu, b_node)) + 2 * (
            (gpus - 1) * a_i + _clog2(nodes) * a_n
        )
    if algo == "hierarchical-ring":
        return (
            2 * (gpus - 1) / gpus * nbytes / b_gpu
            + 2 * (nodes - 1) / nodes * nbytes / b_node
            + 2 * (gpus - 1) * a_i
            + 2 * (nodes - 1) * a_n
        )
    if algo == "halving-doubling":
        return (
            2 * (1 - 1 / gpus) * nbytes / b_gpu
            + 2 * (1 - gpus / p) * nbytes / b_node
            + 2 * _clog2(gpus) * a_i
            + 2 * _clog2(nodes) * a_n
        )
    raise UsageError(f"algorithm {algo!r}: one of ring, tree, hierarchical-ring, halving-doubling")


def tree_correction(nbytes: float) -> float:
    log_size = _log2i(max(1, int(nbytes) >> 6))
    return NCCL_TREE_CORRECTION[log_size] if log_size < len(NCCL_TREE_CORRECTION) else 1.0


def nccl_model_us(algo: str, c: Cluster, nodes: int, gpus: int, nbytes: float, k: Corner) -> float:
    """NCCL's own estimate (its tuning model, Simple protocol) of one allreduce, in us."""
    p = nodes * gpus
    b_gpu, b_node = _bandwidths(c, k)
    bus_gbs = (min(b_gpu, b_node) if nodes > 1 else b_gpu) / 1e9
    intra_hw = "nvlink" if c.intra.gbit_s >= 400 else "pci"
    intra_lat = NCCL_HW_LAT_US[intra_hw][algo]
    inter_lat = NCCL_HW_LAT_US["net" if nodes > 1 else intra_hw][algo]
    if algo == "ring":
        steps, inter_steps = 2 * (p - 1), 2 * (nodes - 1)
        lat = NCCL_BASE_LAT_US["ring"] + (steps - inter_steps) * intra_lat + inter_steps * inter_lat
        if nodes > 1 and nbytes >= p / 16 * 65536:
            lat *= RING_PLATEAU
        bw = bus_gbs * p / steps
    else:
        lat = NCCL_BASE_LAT_US["tree"] + 2 * ((gpus - 1) * intra_lat + _log2i(nodes) * inter_lat)
        bw = bus_gbs * TREE_BW_FACTOR * 0.5 * tree_correction(nbytes)
    return lat + nbytes / (1e3 * bw)


def choose(c: Cluster, nodes: int, gpus: int, nbytes: float, k: Corner) -> str:
    """The algorithm the library runs for this size and scale (or the one the cluster fixes)."""
    if c.algorithm != "auto":
        return c.algorithm
    if c.library == "gloo":
        return "ring"
    if c.library == "mpi":
        return "halving-doubling"
    if nodes * gpus <= 1:
        return "ring"
    return min(("ring", "tree"), key=lambda a: nccl_model_us(a, c, nodes, gpus, nbytes, k))


@functools.lru_cache(maxsize=4096)
def allreduce_s(c: Cluster, ranks: int, nbytes: float, k: Corner) -> tuple[float, str]:
    """(seconds, algorithm) of one allreduce over `ranks` GPUs packed gpus_per_node to a node."""
    g = c.gpus_per_node
    nodes, gpus = (1, ranks) if ranks <= g else (math.ceil(ranks / g), g)
    algo = choose(c, nodes, gpus, nbytes, k)
    return algorithm_time_s(algo, c, nodes, gpus, nbytes, k), algo


NCCL_ALGO_NUMBERS = {"0": "tree", "1": "ring"}  # NCCL < 2.12's enum order (TREE 0, RING 1)
MODELLED = ("ring", "tree")


def algorithm_from_nccl_log(text: str) -> str | None:
    """The algorithm a run's NCCL log names for its allreduces: NCCL_ALGO set by the environment,
    else the one carrying the most bytes in NCCL_DEBUG_SUBSYS=TUNING lines, which NCCL prints as
    "AllReduce: <bytes> Bytes -> Algo <NAME> proto ..." (newer) or "<bytes> Bytes -> Algo <n> proto
    <n> time <us>" (older; 0 tree, 1 ring). None where the log names neither, or names one this
    model does not have (NVLS, CollNet, PAT)."""
    env = re.search(r"NCCL_ALGO set by environment to (\S+)", text)
    if env:
        names = [n.strip().lower() for n in env[1].split(",")]
        return names[0] if len(names) == 1 and names[0] in MODELLED else None
    lines = re.findall(r"(AllReduce: )?(\d+) Bytes -> Algo (\w+)", text)
    if any(prefix for prefix, _, _ in lines):  # newer logs name the collective: keep the allreduces
        lines = [line for line in lines if line[0]]
    carried: dict[str, int] = {}
    for _, nbytes, algo in lines:
        name = NCCL_ALGO_NUMBERS.get(algo, algo.lower())
        carried[name] = carried.get(name, 0) + int(nbytes)
    if not carried:
        return None
    top = max(carried, key=carried.__getitem__)
    return top if top in MODELLED else None
