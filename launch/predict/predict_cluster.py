"""Predictions for a cluster (launch.predict.cluster) with a range on every figure, and the
calibrated non-network term.

The step at N ranks is launch.predict.predict's bucketed schedule with each allreduce costed
by launch.predict.collectives (the library's algorithm over the node and network levels), plus
the non-network term: a per-step overhead o of any multi-rank step (coordination, NCCL kernels
slowing compute, stragglers) and an overlap efficiency e (the share of the wire time under
backward that really hides). Neither can be derived from the network:

- calibrated: fitted on one measured multi-rank run (`calibrate`). One run fixes one number, so
  the fit is a line of (e, o) pairs: o at e = 1 (all the loss is per-step overhead) and o at the
  lowest e of the band (the loss is unhidden communication first); both pairs are carried to the
  other scales and the range spans them. How far it carries: to other N on the same cluster,
  model and software; not to another model or library (rerun a calibration there).
- uncalibrated: o in [0, UNCALIBRATED_OVERHEAD_SHARE x t_c] and e in UNCALIBRATED_OVERLAP; both
  ASSUMED bands (not measured), and the prediction says it is uncalibrated.

Every point carries step, throughput and efficiency at mid, and their range (low/high) over the
network's uncertain inputs (the cluster's fraction and latency bands, launch.predict.collectives
corners) and the non-network term.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from launch.errors import UsageError
from launch.predict import collectives
from launch.predict.cluster import Cluster
from launch.predict.predict import Workload, ddp_buckets, predict_point

UNCALIBRATED_OVERHEAD_SHARE = (0.0, 0.06)  # o / t_c: ASSUMED band
UNCALIBRATED_OVERLAP = (0.6, 1.0)  # e: ASSUMED band


@dataclass(frozen=True)
class ClusterFabric:
    """launch.predict.predict's fabric interface (allreduce_s) for a cluster at one corner."""

    name: str
    cluster: Cluster
    corner: collectives.Corner
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # (bytes, ranks) -> seconds

    @property
    def source(self) -> str:
        return f"cluster model ({self.cluster.library}, {self.cluster.algorithm}, {self.corner.name} corner)"

    def allreduce_s(self, nbytes: float, ranks: int) -> float:
        key = (nbytes, ranks)
        if key not in self.memo:
            self.memo[key] = collectives.allreduce_s(self.cluster, ranks, nbytes, self.corner)[0]
        return self.memo[key]


@dataclass(frozen=True)
class NonNetwork:
    """The (e, o) pairs a prediction spans, mid first; calibrated or assumed."""

    pairs: tuple[tuple[float, float], ...]  # (overlap efficiency, step overhead s)
    calibrated: bool
    source: str

    def as_dict(self) -> dict:
        return {
            "pairs": [{"overlap_efficiency": e, "step_overhead_s": o} for e, o in self.pairs],
            "calibrated": self.calibrated,
            "source": self.source,
        }


def uncalibrated(w: Workload) -> NonNetwork:
    lo, hi = UNCALIBRATED_OVERHEAD_SHARE
    e_lo, e_hi = UNCALIBRATED_OVERLAP
    mid = ((e_lo + e_hi) / 2, (lo + hi) / 2 * w.compute_step_s)
    return NonNetwork(
        (mid, (e_hi, lo * w.compute_step_s), (e_lo, hi * w.compute_step_s)),
        False,
        f"uncalibrated: overhead {lo:.0%}-{hi:.0%} of the compute step and overlap efficiency "
        f"{e_lo:g}-{e_hi:g} ASSUMED",
    )


def _step(w: Workload, c: Cluster, ranks: int, corner: str, e: float, o: float, fabrics: dict | None = None) -> dict:
    fabrics = {} if fabrics is None else fabrics
    fabric = fabrics.setdefault(corner, ClusterFabric(c.name, c, collectives.corners(c)[corner]))
    return predict_point(dataclasses.replace(w, overlap_efficiency=e, step_overhead_s=o), fabric, ranks)


def calibrate(w: Workload, c: Cluster, ranks: int, measured_step_s: float, source: str = "") -> NonNetwork:
    """Fit the non-network term on one measured step at `ranks` (network at its mid corner)."""
    if ranks < 2 or measured_step_s <= 0:
        raise UsageError("a calibration needs a measured multi-rank step (ranks >= 2, step > 0)")
    pairs = []
    for e in (1.0, UNCALIBRATED_OVERLAP[0]):
        base = _step(w, c, ranks, "mid", e, 0.0)["step_s"]
        pairs.append((e, max(0.0, measured_step_s - base)))
    (e1, o1), (e2, o2) = pairs
    mid = ((e1 + e2) / 2, (o1 + o2) / 2)
    return NonNetwork(
        (mid, (e1, o1), (e2, o2)),
        True,
        f"calibrated on {source or 'a measured run'} at {ranks} ranks: step overhead "
        f"{min(o1, o2) * 1e3:.2f}-{max(o1, o2) * 1e3:.2f} ms for overlap efficiency {e2:g}-{e1:g}",
    )


def point(w: Workload, c: Cluster, ranks: int, nonnet: NonNetwork) -> dict:
    """One scale: mid and the range over the network corners and the non-network pairs."""
    e_mid, o_mid = nonnet.pairs[0]
    fabrics: dict = {}
    mid = _step(w, c, ranks, "mid", e_mid, o_mid, fabrics)
    steps = [
        _step(w, c, ranks, corner, e, o, fabrics)["step_s"] for corner in ("fast", "slow") for e, o in nonnet.pairs
    ]
    network_only = _step(w, c, ranks, "mid", 1.0, 0.0, fabrics)
    lo, hi = min(steps + [mid["step_s"]]), max(steps + [mid["step_s"]])
    g = c.gpus_per_node
    corner = collectives.corners(c)["mid"]
    sizes = (
        ddp_buckets(w.gradient_bytes, w.bucket_bytes) if w.engine == "ddp" else [min(w.gradient_bytes, w.bucket_bytes)]
    )
    algorithms = Counter(collectives.allreduce_s(c, ranks, s, corner)[1] for s in sizes) if ranks > 1 else Counter()
    t_c, batch = w.compute_step_s, w.batch_size
    return {
        "cluster": c.name,
        "ranks": ranks,
        "nodes": max(1, -(-ranks // g)),
        "step_s": mid["step_s"],
        "step_s_range": [lo, hi],
        "img_per_s": ranks * batch / mid["step_s"],
        "img_per_s_range": [ranks * batch / hi, ranks * batch / lo],
        "scaling_efficiency": t_c / mid["step_s"],
        "scaling_efficiency_range": [t_c / hi, t_c / lo],
        "exposed_comm": mid["step_s"] / t_c - 1,
        "exposed_comm_range": [lo / t_c - 1, hi / t_c - 1],
        "network_only_efficiency": t_c / network_only["step_s"],
        "allreduce_s": mid["allreduce_s"],
        "allreduces": mid["allreduces"],
        "algorithms": dict(algorithms),
        "calibrated": nonnet.calibrated,
    }


def predict(w: Workload, clusters: list[Cluster], ranks: list[int], nonnet: NonNetwork | None = None) -> dict:
    """Every cluster at every rank count, with its range and every input recorded."""
    if not clusters:
        raise UsageError("no cluster to predict for")
    if not ranks or any(not isinstance(n, int) or n < 1 for n in ranks):
        raise UsageError(f"ranks must be integers >= 1, got {ranks}")
    nonnet = nonnet or uncalibrated(w)
    return {
        "schema_version": 2,
        "kind": "cluster",
        "model": __doc__.split("\n\n")[1].strip(),
        "workload": w.as_dict(),
        "clusters": [c.as_dict() for c in clusters],
        "ranks": list(ranks),
        "non_network": nonnet.as_dict(),
        "points": [point(w, c, n, nonnet) for c in clusters for n in ranks],
    }
