"""The cluster a prediction is for: nodes x GPUs per node, an intra-node level
(NVLink / NVSwitch / PCIe) and an inter-node level (rails x rate per node, the
share of line rate that is achievable, per-hop latency).

Uncertain inputs are ranges (low, high), never one number: the achievable
fraction of line rate and the latencies. Presets (NODE_TYPES, NETWORKS) are
nominal datasheet rates; their achievable fractions and latencies are
ASSUMED bands, printed with every prediction. A cluster comes from a preset
name, flags (`--gpus-per-node`, `--intra`, `--inter`), a site file (JSON,
validated: nothing in it executes), or the probe's `nvidia-smi topo -m` text
and NIC list (`from_probe`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from containers.untrusted import UntrustedInput, read_json
from launch.errors import UsageError

Range = tuple[float, float]


@dataclass(frozen=True)
class IntraNode:
    """What one GPU can push to its peers in the node: per-direction bandwidth per GPU."""

    name: str
    gpus: int
    gbit_s: float  # per GPU, one direction, nominal
    latency_us: Range  # per hop
    fraction: Range = (0.80, 0.90)  # achievable share of nominal in NCCL's busbw (assumed)
    source: str = "preset (nominal datasheet rate; fraction and latency assumed)"


@dataclass(frozen=True)
class InterNode:
    """The node's network: rails x rate, the achievable share of it, the per-hop latency."""

    name: str
    rails: int
    gbit_s: float  # per rail, line rate
    fraction: Range  # achievable share of rails x rate (assumed unless measured)
    latency_us: Range  # per hop, small messages
    transport: str = "rdma"  # rdma | tcp
    source: str = "preset (line rate; fraction and latency assumed)"

    @property
    def node_gbit_s(self) -> float:
        return self.rails * self.gbit_s


# Intra-node presets: per-GPU, per-direction nominal bandwidth (datasheet: NVLink total / 2)
NODE_TYPES = {
    "dgx-1-p100": IntraNode("DGX-1 P100 (NVLink 1, hybrid cube mesh)", 8, 80 * 8, (1.0, 3.0)),
    "dgx-1-v100": IntraNode("DGX-1 V100 (NVLink 2, hybrid cube mesh)", 8, 150 * 8, (1.0, 3.0)),
    "dgx-2h": IntraNode("DGX-2H (16 V100, NVLink 2, NVSwitch)", 16, 150 * 8, (1.0, 3.0)),
    "hgx-a100": IntraNode("DGX/HGX A100 (NVLink 3, NVSwitch)", 8, 300 * 8, (1.0, 3.0)),
    "hgx-h100": IntraNode("DGX/HGX H100 (NVLink 4, NVSwitch)", 8, 450 * 8, (1.0, 3.0)),
    "hgx-h200": IntraNode("HGX H200 (NVLink 4, NVSwitch)", 8, 450 * 8, (1.0, 3.0)),
    "hgx-b200": IntraNode("DGX/HGX B200 (NVLink 5, NVSwitch)", 8, 900 * 8, (1.0, 3.0)),
    "pcie4-8": IntraNode("8 GPUs on PCIe Gen4 x16", 8, 32 * 8, (2.0, 5.0), (0.60, 0.80)),
    "pcie3-4": IntraNode("4 GPUs on PCIe Gen3 x16", 4, 16 * 8, (2.0, 5.0), (0.60, 0.80)),
    "pcie-p100-4": IntraNode("4 Pascal GPUs on PCIe Gen3 x16", 4, 16 * 8, (2.0, 5.0), (0.60, 0.80)),
    "single": IntraNode("one GPU per node", 1, 1e6, (0.0, 0.0), (1.0, 1.0), "no intra-node level"),
}

# Inter-node presets. Fractions and latencies are ASSUMED bands: RDMA fabrics reach most
# of line rate in NCCL's busbw; NCCL's socket transport over one TCP NIC reaches less.
NETWORKS = {
    "ib-ndr-8x400": InterNode("8 x 400 Gb InfiniBand NDR", 8, 400, (0.80, 0.95), (3.0, 6.0)),
    "roce-8x400": InterNode("8 x 400 GbE RoCE", 8, 400, (0.75, 0.92), (4.0, 10.0)),
    "tcp-200": InterNode("1 x 200 GbE TCP (NCCL sockets)", 1, 200, (0.40, 0.80), (15.0, 40.0), "tcp"),
    "tcp-100": InterNode("1 x 100 GbE TCP (NCCL sockets)", 1, 100, (0.50, 0.90), (15.0, 40.0), "tcp"),
    "ib-hdr-8x200": InterNode("8 x 200 Gb InfiniBand HDR", 8, 200, (0.80, 0.95), (3.0, 6.0)),
    "ib-edr-1x100": InterNode("1 x 100 Gb InfiniBand EDR", 1, 100, (0.80, 0.95), (3.0, 6.0)),
    "ib-edr-8x100": InterNode("8 x 100 Gb InfiniBand EDR", 8, 100, (0.80, 0.95), (3.0, 6.0)),
    "roce-25": InterNode("1 x 25 GbE RoCE", 1, 25, (0.75, 0.92), (5.0, 15.0)),
    "tcp-25": InterNode("1 x 25 GbE TCP", 1, 25, (0.60, 0.90), (15.0, 40.0), "tcp"),
}

LIBRARIES = ("nccl", "gloo", "mpi")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical-ring", "halving-doubling")


@dataclass(frozen=True)
class Cluster:
    """Nodes of gpus_per_node GPUs, one intra and one inter level, and the library that reduces."""

    name: str
    intra: IntraNode
    inter: InterNode
    library: str = "nccl"
    algorithm: str = "auto"  # auto: what the library would choose (launch.predict.collectives)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def gpus_per_node(self) -> int:
        return self.intra.gpus

    def as_dict(self) -> dict:
        return {**asdict(self), "gpus_per_node": self.gpus_per_node, "node_gbit_s": self.inter.node_gbit_s}


def make(
    node_type: str,
    network: str,
    library: str = "nccl",
    algorithm: str = "auto",
    gpus_per_node: int | None = None,
    name: str | None = None,
) -> Cluster:
    if node_type not in NODE_TYPES:
        raise UsageError(f"node type {node_type!r}: one of {', '.join(NODE_TYPES)}")
    if network not in NETWORKS:
        raise UsageError(f"network {network!r}: one of {', '.join(NETWORKS)} (or --inter RAILSxGBIT...)")
    intra = NODE_TYPES[node_type]
    if gpus_per_node is not None:
        intra = replace(intra, gpus=_positive_int(gpus_per_node, "--gpus-per-node"))
    return checked(Cluster(name or f"{node_type} + {network}", intra, NETWORKS[network], library, algorithm))


def checked(c: Cluster) -> Cluster:
    if c.library not in LIBRARIES:
        raise UsageError(f"library {c.library!r}: one of {', '.join(LIBRARIES)}")
    if c.algorithm not in ALGORITHMS:
        raise UsageError(f"algorithm {c.algorithm!r}: one of {', '.join(ALGORITHMS)}")
    for what, rng in (("intra fraction", c.intra.fraction), ("inter fraction", c.inter.fraction)):
        if not (0 < rng[0] <= rng[1] <= 1):
            raise UsageError(f"{c.name}: {what} must be 0 < low <= high <= 1, got {rng}")
    for what, rng in (("intra latency", c.intra.latency_us), ("inter latency", c.inter.latency_us)):
        if not (0 <= rng[0] <= rng[1]):
            raise UsageError(f"{c.name}: {what} must be 0 <= low <= high (us), got {rng}")
    if c.intra.gpus < 1 or c.inter.rails < 1 or c.inter.gbit_s <= 0 or c.intra.gbit_s <= 0:
        raise UsageError(f"{c.name}: GPUs per node, rails and rates must be positive")
    return c


def _positive_int(value, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{what} must be an integer >= 1, got {value!r}")
    return value


def _range(text: str, what: str) -> Range:
    """'0.8' or '0.8-0.95' -> (low, high)."""
    try:
        parts = [float(x) for x in text.split("-")] if text else []
    except ValueError:
        parts = []
    if len(parts) not in (1, 2):
        raise UsageError(f"{what} expects a number or LOW-HIGH, got {text!r}")
    return (parts[0], parts[-1])


def parse_inter(text: str) -> InterNode:
    """RAILSxGBIT[,FRACTION[-HIGH]][,LATENCY_US[-HIGH]][,tcp] e.g. 8x400,0.8-0.95,3-6 -> an inter level."""
    if text in NETWORKS:
        return NETWORKS[text]
    head, *rest = text.split(",")
    m = re.fullmatch(r"(\d+)x(\d+(?:\.\d+)?)", head.strip())
    if not m or len(rest) > 3:
        raise UsageError(
            f"--inter expects a preset ({', '.join(NETWORKS)}) or "
            f"RAILSxGBIT[,FRACTION[-HIGH]][,LATENCY_US[-HIGH]][,tcp], got {text!r}"
        )
    transport = "tcp" if rest and rest[-1].strip() == "tcp" else "rdma"
    if transport == "tcp":
        rest = rest[:-1]
    fraction = _range(rest[0], "--inter FRACTION") if rest else ((0.5, 0.9) if transport == "tcp" else (0.8, 0.95))
    latency = (
        _range(rest[1], "--inter LATENCY_US") if len(rest) > 1 else ((15.0, 40.0) if transport == "tcp" else (3.0, 8.0))
    )
    return InterNode(
        f"{m[1]} x {m[2]} Gbit/s ({transport})",
        int(m[1]),
        float(m[2]),
        fraction,
        latency,
        transport,
        "command line" + ("" if len(rest) > 1 else " (fraction/latency assumed)"),
    )


def parse_intra(text: str, gpus: int | None) -> IntraNode:
    """A node-type preset, or GBIT_PER_GPU[,LATENCY_US[-HIGH]] for the intra-node level."""
    if text in NODE_TYPES:
        intra = NODE_TYPES[text]
    else:
        head, *rest = text.split(",")
        try:
            rate = float(head)
        except ValueError:
            rate = -1
        if rate <= 0 or len(rest) > 1:
            raise UsageError(
                f"--intra expects a node type ({', '.join(NODE_TYPES)}) or "
                f"GBIT_PER_GPU[,LATENCY_US[-HIGH]], got {text!r}"
            )
        intra = IntraNode(
            f"{rate:g} Gbit/s per GPU",
            gpus or 8,
            rate,
            _range(rest[0], "--intra LATENCY_US") if rest else (1.0, 5.0),
            (0.8, 0.9),
            "command line",
        )
    return replace(intra, gpus=_positive_int(gpus, "--gpus-per-node")) if gpus is not None else intra


MAX_DESCRIPTION_BYTES = 16 << 20  # a cluster description or a probe report is a few KiB
SITE_KEYS = {"name", "node_type", "gpus_per_node", "intra", "inter", "library", "algorithm"}


def from_site_file(path: Path) -> Cluster:
    """A site's cluster description (JSON): untrusted, every field checked, nothing executed.

    {"name": "...", "node_type": "hgx-h100" | "intra": {"gbit_s": ..., "latency_us": [lo, hi]},
     "gpus_per_node": 8, "inter": "ib-ndr-8x400" | {"rails": 8, "gbit_s": 400, "fraction": [lo, hi],
     "latency_us": [lo, hi], "transport": "rdma"}, "library": "nccl", "algorithm": "auto"}
    """
    try:
        data = read_json(path, MAX_DESCRIPTION_BYTES, "file")
    except UntrustedInput as exc:
        raise UsageError(f"--cluster-file {path}: not a readable JSON cluster description ({exc.reason})") from None
    if not isinstance(data, dict) or set(data) - SITE_KEYS:
        raise UsageError(
            f"--cluster-file {path}: an object with keys among {sorted(SITE_KEYS)}"
            + (f", not {sorted(set(data) - SITE_KEYS)}" if isinstance(data, dict) else "")
        )
    gpus = data.get("gpus_per_node")
    if gpus is not None:
        _positive_int(gpus, f"{path}: gpus_per_node")
    if isinstance(data.get("intra"), dict):
        i = data["intra"]
        intra = IntraNode(
            str(i.get("name", "site intra-node level")),
            gpus or 8,
            _num(i.get("gbit_s"), path, "intra.gbit_s"),
            _pair(i.get("latency_us", [1, 5]), path, "intra.latency_us"),
            _pair(i.get("fraction", [0.8, 0.9]), path, "intra.fraction"),
            f"site file {path.name}",
        )
    else:
        intra = parse_intra(str(data.get("node_type", "hgx-h100")), gpus)
    if isinstance(data.get("inter"), dict):
        n = data["inter"]
        rails = n.get("rails")
        _positive_int(rails, f"{path}: inter.rails")
        transport = n.get("transport", "rdma")
        if transport not in ("rdma", "tcp"):
            raise UsageError(f"{path}: inter.transport is rdma or tcp, not {transport!r}")
        inter = InterNode(
            str(n.get("name", "site network")),
            rails,
            _num(n.get("gbit_s"), path, "inter.gbit_s"),
            _pair(n.get("fraction"), path, "inter.fraction"),
            _pair(n.get("latency_us"), path, "inter.latency_us"),
            transport,
            f"site file {path.name}",
        )
    elif isinstance(data.get("inter"), str):
        inter = parse_inter(data["inter"])
    else:
        raise UsageError(f"--cluster-file {path}: 'inter' (a network preset or an object) is required")
    return checked(
        Cluster(
            str(data.get("name", path.stem)),
            intra,
            inter,
            str(data.get("library", "nccl")),
            str(data.get("algorithm", "auto")),
        )
    )


def _num(value, path: Path, what: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise UsageError(f"{path}: {what} must be a positive number, got {value!r}")
    return float(value)


def _pair(value, path: Path, what: str) -> Range:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise UsageError(f"{path}: {what} must be [low, high], got {value!r}")
    return (float(value[0]), float(value[1]))


def from_probe(topo_matrix: str, nic_gbit_s: list[float], transport: str = "rdma") -> tuple[IntraNode, InterNode]:
    """The node as the probe saw it: GPUs and their links from `nvidia-smi topo -m` (parsed by
    launch.site.probe), the NICs' count and rates. NV# entries are NVLink: where every pair shows the
    same NV# the GPUs hang off NVSwitches and # is each GPU's links, otherwise a GPU's links are the
    sum over its peers; 25 GB/s per link and direction (NVLink 2-4) is assumed. No NVLink: PCIe
    Gen3 x16 is assumed, the matrix saying nothing more precise."""
    from launch.site.probe import parse_nvidia_smi_topo

    return _from_topology(parse_nvidia_smi_topo(topo_matrix), nic_gbit_s, transport)


def from_probe_report(path: Path) -> tuple[IntraNode, InterNode]:
    """The levels from `fabric-bench probe --json` saved on a node (untrusted: checked, nothing runs):
    its topology matrix, and its active RDMA ports' rates (else its up NICs' speeds, TCP)."""
    from launch.site.probe import GpuTopology, TopoGpu

    try:
        facts = read_json(path, MAX_DESCRIPTION_BYTES, "file")["facts"]
        topo = facts.get("gpu_topology") or {}
        topology = GpuTopology(
            gpus=[
                TopoGpu(int(g["index"]), None, None, {str(k): str(v) for k, v in (g.get("links") or {}).items()})
                for g in topo.get("gpus") or []
            ]
        )
        rdma = [
            float(p["rate_gbps"])
            for p in facts.get("rdma_ports") or []
            if p.get("state") == "ACTIVE" and isinstance(p.get("rate_gbps"), (int, float))
        ]
        tcp = [
            n["speed_mbps"] / 1e3
            for n in facts.get("nics") or []
            if n.get("operstate") == "up" and isinstance(n.get("speed_mbps"), int) and n["speed_mbps"] > 0
        ]
    except (UntrustedInput, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"--probe-json {path}: not a `fabric-bench probe --json` report "
            f"({exc.reason if isinstance(exc, UntrustedInput) else exc})"
        ) from None
    return _from_topology(topology, rdma or tcp, "rdma" if rdma else "tcp")


def _from_topology(topology, nic_gbit_s: list[float], transport: str) -> tuple[IntraNode, InterNode]:
    if topology is None or not topology.gpus:
        raise UsageError("the topology matrix names no GPU rows (`nvidia-smi topo -m` output expected)")
    peers = [{k: v for k, v in g.links.items() if k.startswith("GPU")} for g in topology.gpus]
    gpus = max(len(topology.gpus), max(len(p) for p in peers) + 1)
    nv = [[int(m[1]) for v in p.values() for m in [re.fullmatch(r"NV(\d+)", v)] if m] for p in peers]
    if any(nv):
        flat = [k for row in nv for k in row]
        switched = gpus > 2 and all(len(row) == gpus - 1 for row in nv) and len(set(flat)) == 1
        links = flat[0] if switched else max(sum(row) for row in nv)  # a switch: every pair shows all links
        intra = IntraNode(
            f"NVLink, {links} links per GPU{' (switched)' if switched else ''} in topo -m",
            gpus,
            links * 25 * 8,
            (1.0, 3.0),
            source="probe (nvidia-smi topo -m; 25 GB/s per link and direction assumed: NVLink 2-4)",
        )
    else:
        intra = IntraNode(
            "PCIe (no NVLink in topo -m)",
            gpus,
            16 * 8,
            (2.0, 5.0),
            (0.6, 0.8),
            "probe (nvidia-smi topo -m; PCIe Gen3 x16 assumed)",
        )
    rates = [r for r in nic_gbit_s if r > 0]
    if not rates:
        raise UsageError("the probe found no NIC with a rate")
    preset = NETWORKS["tcp-100" if transport == "tcp" else "ib-edr-1x100"]
    inter = InterNode(
        f"{len(rates)} x {min(rates):g} Gbit/s ({transport}, probed)",
        len(rates),
        min(rates),
        preset.fraction,
        preset.latency_us,
        transport,
        "probe (NIC count and rate; fraction assumed)",
    )
    return intra, inter
