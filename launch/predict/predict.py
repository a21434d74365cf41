"""Scaling prediction: step time, throughput and scaling efficiency of data-parallel
training at N = 1 ... 1024 ranks, from a measured compute step, the gradient
size and an alpha-beta model of the fabric's allreduce (launch.predict.model).

The step, per rank (t_c: the compute-only step, forward + backward + update):

    forward       = (1 - b) * t_c          b: backward share of the compute step (assumed 2/3)
    backward      = b * t_c, producing the G gradient bytes at an even rate
    communication = bucketed ring allreduces on one stream, each started when
                    its bucket is ready and the previous allreduce is done:
      ddp      fixed buckets in backward order: first 1 MiB, then bucket_cap_mb (25 MiB)
      horovod  every cycle_time_ms (1 ms) the ready gradients, fused up to the
               fusion threshold (128 MiB), go out as one allreduce
    step (overlapped) = forward + max(backward, end of the last allreduce), plus h by its rule
    step (no overlap) = t_c + h + sum of the buckets' allreduce times   (an upper bound)

h is the host's own cost of the exchange (copies into and out of buckets or the
fusion buffer, reductions, the TCP stack, MPI's polling thread) where
communication and compute share cores (CPU runs, small hosts): 0 unless
measured, e.g. as the step of the same training on an unshaped link minus its
compute step (`--host-overhead-from`); scaled by (p-1)/p like the ring's bytes
per rank. How it meets the step depends on the engine (HOST_RULE):

    ddp      in series: step = forward + max(backward, end) + h. Each bucket is
             copied in on the cores that compute and averaged and copied out
             after its transfer, so with no core to spare h hides neither under
             the compute nor under the wire.
    horovod  spread over the wire: h is spread evenly over the allreduces' wire
             time; the share that falls while backward runs takes the cores
             from the compute, the rest runs beside the wire's tail:
             step = forward + backward + s*h + max(end - backward, (1-s)*h).
             Horovod's background thread copies, reduces and sends each fused
             buffer segment by segment while the transfer proceeds.

Provenance: the rules were chosen by measurement on this 2-core host
(benchmarks/predict_validation.py, 2-node training at 0.5-5 Gbit). Over three
earlier sittings, series for both engines beat hiding h under the wire, the
larger of the overlapped step without h and t_c + h (median |error| 4.2 % vs
8.3 %; 6 vs 18 of 48 points beyond 10 %). In the sitting of 2026-12-02 the
spread rule held every Horovod point within 10 % (series: 6/8, off by up to
31 % on a slow link, where Horovod's h largely hides); for DDP, series held 7/8
(spread: 4/8). The per-engine choice, fixed before it, was then checked on a
fresh sitting the same day. All 16 training points but one came within 10 %
(the one: +10.4 %), median 4.4 %; in series for both engines, 2/16 missed, by up
to 20.3 %.

Throughput = N x batch / step; scaling efficiency = t_c(1 rank) / step(N).
Every allreduce is a ring: its latency term 2(N-1)alpha grows with N, where
libraries switch to trees at scale, so at large N high-latency fabrics come out
pessimistic.
A prediction records every input (predict.json) so it can be reproduced.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from containers.fabrics import PROFILES
from launch.errors import UsageError
from launch.kinds import kind_of, trains
from launch.kinds.sizes import rows_of
from launch.predict.model import AlphaBeta
from launch.results.result import Result, as_result, field_of, fields_of, number, typed
from launch.schema import at

MIB = 2**20
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed's first bucket
DDP_BUCKET_CAP_MB = 25.0  # DistributedDataParallel(bucket_cap_mb=25) default
HOROVOD_FUSION_BYTES = 128 * MIB  # Horovod >= 0.21 defaults
HOROVOD_CYCLE_MS = 1.0
BACKWARD_SHARE = 2 / 3  # backward ~ 2x forward: an assumption, printed with every prediction
# How the host's cost of the exchange (h, module doc) meets the step, per engine
HOST_RULE = {"ddp": "series", "horovod": "spread"}
DEFAULT_RANKS = tuple(2**k for k in range(11))  # 1 .. 1024
# allreduces per step the schedule simulates, at most (DDP: gradient bytes / bucket; Horovod: also
# cycles per backward pass): GPT-3's 350 GB of fp16 gradients in 25 MiB buckets are 13000
MAX_ALLREDUCES_PER_STEP = 100_000


@dataclass(frozen=True)
class Fabric:
    """An allreduce model for one fabric: fitted from an allreduce run, or nominal (line rate, latency)."""

    name: str
    alpha_s: float
    bandwidth_gbit_s: float
    source: str  # "nominal" or the allreduce result it was fitted on

    @property
    def model(self) -> AlphaBeta:
        return AlphaBeta(self.alpha_s, 8 / (self.bandwidth_gbit_s * 1e9), ranks=2)

    def allreduce_s(self, nbytes: float, ranks: int) -> float:
        return self.model.allreduce_s(nbytes, ranks)


# Nominal presets: the line rate and a typical small-message latency, NOT measured here. Each
# fabric's plug-in declares its own (containers/fabrics/NAME.py: the profile's `nominal`).
NOMINAL = {
    link.name: Fabric(link.name, link.latency_s, link.rate_gbit_s, "nominal")
    for profile in PROFILES.values()
    for link in profile.nominal
}


@dataclass(frozen=True)
class Workload:
    """What one rank computes and exchanges per step."""

    engine: str  # ddp | horovod
    batch_size: int  # per rank
    compute_step_s: float  # t_c: the step without gradient exchange
    gradient_bytes: int
    bucket_bytes: float  # ddp: bucket cap; horovod: fusion threshold
    cycle_s: float = HOROVOD_CYCLE_MS / 1e3  # horovod only
    backward_share: float = BACKWARD_SHARE
    host_overhead_s: float = 0.0  # h at host_overhead_ranks (see the module doc); 0: not measured
    host_overhead_ranks: int = 2
    source: dict | None = None  # where the numbers came from
    # the non-network term (launch.predict.predict_cluster calibrates it): o, a per-step cost of
    # any multi-rank step, and e, the share of the wire time under backward that really hides
    step_overhead_s: float = 0.0
    overlap_efficiency: float = 1.0

    def as_dict(self) -> dict:
        return asdict(self)


def workload_from(
    train: dict,
    engine: str | None = None,
    bucket_mb: float | None = None,
    cycle_ms: float | None = None,
    backward_share: float = BACKWARD_SHARE,
) -> Workload:
    """The workload of a train result: its compute-only step (measured with its own ranks sharing the
    host, as they do while training), gradient bytes and the engine's bucket settings."""
    result = as_result(train)
    if result.benchmark is not None and not trains(result.benchmark):
        raise UsageError(f"{result.run_id}: a {result.benchmark} result, not a training result")
    fields = fields_of(result)
    compute = number(at(fields, "compute_img_per_s"))
    if not compute or compute <= 0:
        raise UsageError(
            f"{fields.run_id}: the train result has no compute_img_per_s "
            "(the compute-only step); rerun it with this version of fabric-bench"
        )
    gradient_bytes = number(at(fields, "gradient_bytes"))
    if not gradient_bytes or gradient_bytes <= 0 or not gradient_bytes.is_integer():
        raise UsageError(f"{fields.run_id}: the train result has no gradient_bytes")
    ranks, batch = fields.world_size or 1, at(fields, "spec.batch_size")
    if not isinstance(batch, int) or batch < 1:
        raise UsageError(f"{fields.run_id}: the train result has no spec.batch_size")
    engine = engine or fields.engine or "ddp"
    if engine not in ("ddp", "horovod"):
        raise UsageError(f"engine {engine!r}: the predictor models ddp and horovod")
    info = at(fields, "engine_info") or {}
    wire = at(fields, "wire") if isinstance(at(fields, "wire"), dict) else {}  # bench.numerics.wire, newer results
    spec_bucket_mb, spec_fusion_mb = at(fields, "spec.bucket_cap_mb"), at(fields, "spec.fusion_threshold_mb")
    for flag, given in (("--bucket-mb", bucket_mb), ("--cycle-ms", cycle_ms)):
        if given is not None and not (math.isfinite(given) and given > 0):
            raise UsageError(f"{flag} must be a number > 0, got {given}")
    if engine == "ddp":
        cap = bucket_mb or _positive(info.get("bucket_cap_mb")) or _positive(spec_bucket_mb) or DDP_BUCKET_CAP_MB
        wire_bucket = _positive(wire.get("bucket_bytes"))
        bucket = cap * MIB if bucket_mb or not wire_bucket else wire_bucket
    else:
        threshold = _positive(info.get("fusion_threshold_bytes")) or _positive(wire.get("fusion_threshold_bytes"))
        bucket = (
            bucket_mb * MIB
            if bucket_mb
            else threshold
            if threshold
            else (_positive(spec_fusion_mb) or 0) * MIB or HOROVOD_FUSION_BYTES
        )
    cycle = (
        cycle_ms
        or _positive(info.get("cycle_time_ms"))
        or _positive(at(fields, "spec.cycle_time_ms"))
        or HOROVOD_CYCLE_MS
    )
    if not 0 < backward_share <= 1:
        raise UsageError(f"--backward-share must be in (0, 1], got {backward_share}")
    step = batch * ranks / compute
    # the schedule is simulated allreduce by allreduce (Horovod's cycle by cycle): bounded
    allreduces = (
        gradient_bytes / bucket
        if engine == "ddp"
        else max(gradient_bytes / bucket, backward_share * step * 1e3 / cycle)
    )
    if not math.isfinite(step) or allreduces > MAX_ALLREDUCES_PER_STEP:
        raise UsageError(
            f"{fields.run_id}: {gradient_bytes:.4g} gradient bytes in {bucket:.4g}-byte buckets over a "
            f"{step:.4g} s step are more than {MAX_ALLREDUCES_PER_STEP} allreduces per step to simulate"
            + (f" (a {cycle:g} ms cycle)" if engine == "horovod" else "")
        )
    return Workload(
        engine=engine,
        batch_size=batch,
        compute_step_s=step,
        gradient_bytes=int(gradient_bytes),
        bucket_bytes=bucket,
        cycle_s=float(cycle) / 1e3,
        backward_share=backward_share,
        source={
            "run_id": fields.run_id,
            "world_size": ranks,
            "model": fields.model,
            "compute_img_per_s": compute,
            "measured_with_ranks_sharing_the_host": ranks,
            "wire_dtype": wire.get("dtype") or at(fields, "numerics.gradient_wire_dtype"),
        },
    )


def _float(value) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _positive(value: object) -> float | None:
    """A setting a result records (a number, or its text as an environment variable holds it):
    finite and > 0, else None (not recorded)."""
    found = None if isinstance(value, bool) else _float(value)
    return found if found is not None and math.isfinite(found) and found > 0 else None


def ddp_buckets(gradient_bytes: int, cap_bytes: float) -> list[float]:
    """Bucket sizes in the order they become ready: a 1 MiB first bucket, then the cap."""
    sizes: list[float] = []
    left = float(gradient_bytes)
    first = min(DDP_FIRST_BUCKET_BYTES, cap_bytes)
    while left > 0:
        size = min(left, first if not sizes else cap_bytes)
        sizes.append(size)
        left -= size
    return sizes


Wire = list[tuple[float, float]]  # (start from the start of backward, duration) of each allreduce


def _ddp_schedule(w: Workload, fabric: Fabric, ranks: int) -> Wire:
    """Each bucket's allreduce on the stream, in the order the buckets become ready."""
    backward = w.backward_share * w.compute_step_s
    ready_bytes, end, wire = 0.0, 0.0, []
    for size in ddp_buckets(w.gradient_bytes, w.bucket_bytes):
        ready_bytes += size
        ready = backward * ready_bytes / w.gradient_bytes
        t = fabric.allreduce_s(size, ranks)
        wire.append((max(ready, end), t))
        end = max(ready, end) + t
    return wire


def _horovod_schedule(w: Workload, fabric: Fabric, ranks: int) -> Wire:
    """Cycle by cycle: what is ready when the stream is free goes out, fused up to the threshold."""
    backward = w.backward_share * w.compute_step_s
    rate = w.gradient_bytes / backward  # bytes produced per second of backward
    cycle = max(w.cycle_s, 1e-6)
    sent, free, wire = 0.0, 0.0, []
    while sent < w.gradient_bytes - 0.5:
        # the first cycle boundary at which the stream is free and something is ready
        t = max(free, sent / rate)
        t = math.ceil(t / cycle - 1e-9) * cycle
        ready = min(w.gradient_bytes, rate * t)
        if ready - sent < 0.5:  # nothing new by then: the next cycle
            t += cycle
            ready = min(w.gradient_bytes, rate * t)
        size = min(ready - sent, w.bucket_bytes) if w.bucket_bytes > 0 else ready - sent
        duration = fabric.allreduce_s(size, ranks)
        wire.append((t, duration))
        free = t + duration
        sent += size
    return wire


def predict_point(w: Workload, fabric: Fabric, ranks: int) -> dict:
    if ranks < 1:
        raise UsageError(f"ranks must be >= 1, got {ranks}")
    forward = (1 - w.backward_share) * w.compute_step_s
    backward = w.backward_share * w.compute_step_s
    if ranks == 1:
        wire: Wire = []
    elif w.engine == "ddp":
        wire = _ddp_schedule(w, fabric, ranks)
    else:
        wire = _horovod_schedule(w, fabric, ranks)
    end = max((start + t for start, t in wire), default=0.0)
    allreduce = sum(t for _, t in wire)
    host = 0.0
    if ranks > 1 and w.host_overhead_s:
        m = max(2, w.host_overhead_ranks)
        host = w.host_overhead_s * ((ranks - 1) / ranks) / ((m - 1) / m)
    series = forward + max(backward, end) + host
    no_overlap = w.compute_step_s + host + allreduce
    # h spread evenly over the wire time of the allreduces: its share while backward runs takes
    # the cores from the compute, the rest runs beside the wire's tail
    during = sum(max(0.0, min(start + t, backward) - start) for start, t in wire)
    share = during / allreduce if allreduce > 0 else 1.0
    spread = forward + backward + share * host + max(end - backward, (1 - share) * host, 0.0)
    rule = HOST_RULE[w.engine]
    step = spread if rule == "spread" else series
    # the non-network term: the share (1 - e) of the wire time under backward that fails to hide,
    # and the per-step overhead o of any multi-rank step
    unhidden = (1 - w.overlap_efficiency) * sum(max(0.0, min(start + t, backward) - start) for start, t in wire)
    if ranks > 1:
        step += unhidden + w.step_overhead_s
        no_overlap += w.step_overhead_s
    return {
        "fabric": fabric.name,
        "ranks": ranks,
        "step_s": step,
        "step_no_overlap_s": no_overlap,
        "host_rule": rule,
        "step_host_series_s": series,
        "step_host_spread_s": spread,
        "wire_during_backward": share,
        "allreduce_s": allreduce,
        "allreduces": len(wire),
        "host_overhead_s": host,
        "exposed_comm_s": step - w.compute_step_s,
        "img_per_s": ranks * w.batch_size / step,
        "img_per_s_no_overlap": ranks * w.batch_size / no_overlap,
        "scaling_efficiency": w.compute_step_s / step,
        "scaling_efficiency_no_overlap": w.compute_step_s / no_overlap,
    }


def predict(w: Workload, fabrics: list[Fabric], ranks: list[int]) -> dict:
    """Every fabric at every rank count, with every input recorded."""
    bad = [n for n in ranks if not isinstance(n, int) or n < 1]
    if bad or not ranks:
        raise UsageError(f"ranks must be integers >= 1, got {bad or 'none'}")
    if not fabrics:
        raise UsageError("no fabric to predict for: give --allreduce RESULT, --link NAME=GBIT[,US] or --nominal")
    return {
        "schema_version": 1,
        "model": __doc__.split("\n\n")[1].strip(),
        "workload": w.as_dict(),
        "fabrics": [asdict(f) for f in fabrics],
        "ranks": list(ranks),
        "points": [predict_point(w, f, n) for f in fabrics for n in ranks],
    }


def host_overhead_from(train: dict) -> tuple[float, int]:
    """h of a training run on a link too fast to matter: its measured step minus its compute step
    (never below 0), at its rank count."""
    w = workload_from(train)
    fields, run = typed(train), as_result(train)
    throughput = getattr(fields, "throughput", None)
    per_rank = number(throughput.per_rank_img_per_s) if throughput is not None else None
    measured = w.batch_size / per_rank if per_rank else None
    if measured is None or run.world_size is None or run.world_size < 2:
        raise UsageError(f"{run.run_id}: --host-overhead-from needs a multi-rank train result with throughput")
    return max(0.0, measured - w.compute_step_s), run.world_size


def fabric_from_allreduce(result: Result, name: str | None = None, min_bytes: int = 8 * MIB) -> Fabric:
    """alpha-beta fitted on an allreduce result's rows of >= min_bytes (beyond a shaper's burst)."""
    from launch.predict.model import fit

    kind, run = kind_of(result), result
    if not run.sizes or kind is None or not kind.fits_alpha_beta:
        raise UsageError(f"{run.run_id}: not an allreduce result (no sizes)")
    ranks = run.world_size or 0
    rows = [  # its typed rows (another site's: numbers where numbers belong), each with a size and a time
        {"bytes": r.bytes, "time_us": r.time_us}
        for r in rows_of(fields_of(result))
        if r.bytes is not None and r.bytes > 0 and r.time_us is not None and r.time_us > 0
    ]
    large = [r for r in rows if r["bytes"] >= min_bytes]
    try:
        model = fit(large if len(large) >= 2 else rows, ranks)
    except (ValueError, KeyError, ArithmeticError) as exc:
        raise UsageError(f"{run.run_id}: cannot fit the alpha-beta model: {exc}") from None
    if not (math.isfinite(model.alpha_s) and math.isfinite(model.bandwidth_gbit_s) and model.bandwidth_gbit_s > 0):
        raise UsageError(
            f"{run.run_id}: cannot fit the alpha-beta model: its rows give no finite latency and bandwidth"
        )
    rate = field_of(result, "link_rate_gbit_s")
    label = name or run.fabric or (f"emulated {rate:g} Gbit/s" if rate else "default")
    return Fabric(
        label,
        model.alpha_s,
        model.bandwidth_gbit_s,
        f"fitted on {run.run_id} ({field_of(result, 'backend')}, {ranks} ranks, rows >= {min_bytes} B)",
    )


def result_fabric(result: Result) -> str | None:
    """The fabric names a result answers to: its preset, or emu-eth-<rate> for an emulated link."""
    return result.fabric


def parse_link(text: str) -> Fabric:
    """NAME=GBIT[,LATENCY_US] -> a nominal fabric."""
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    try:
        rate = float(parts[0])
        latency = float(parts[1]) if len(parts) > 1 else 5.0
    except (ValueError, IndexError):
        rate = latency = -1.0
    if not sep or not name or rate <= 0 or latency < 0 or len(parts) > 2:
        raise UsageError(f"--link expects NAME=GBIT_PER_S[,LATENCY_US] (e.g. 25GbE=25,10), got {text!r}")
    return Fabric(name, latency * 1e-6, rate, "nominal (command line)")


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--ranks expects integers >= 1 separated by commas, got {text!r}") from None
    if not ranks or any(n < 1 for n in ranks):
        raise UsageError(f"--ranks expects integers >= 1, got {text!r}")
    return ranks
