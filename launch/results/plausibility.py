"""Is this number normal? An expected-performance verdict for every result whose kind has a
bandwidth to judge (each kind's rule: launch.kinds; the size sweeps' busbw at large messages, a
training run's implied busbw).

The question users keep asking (NVIDIA/nccl-tests#40, #293, #309, #389) has
the maintainers' answer: compare the bus bandwidth at large messages with the
hardware's peak (nccl-tests: busbw "reflects how optimally the hardware is
used"); a healthy run gets close to the line rate, around 0.9 of it and above.
GPUDirect RDMA silently off after an OS upgrade drops an allreduce from 180 to
10 GB/s (NVIDIA/nccl#1676): asked vs observed GPUDirect is checked on NCCL runs.

The line rate, in order: the emulated link's rate (`link_rate_gbit_s`), the site
file's `link_gbit_s` for the fabric, the probe of the NIC the run's traffic used
(RDMA port rate, or the interface's speed). None of them: `unknown`. That rate is
one NIC's; a node drives several rails at once (nccl-tests: 2 nodes x 8 GPUs x 8 NICs
reach a busbw near 8 x one NIC's), so the ceiling is the line rate times the rails
the run's ranks can use on a node (`rails_in_use`).

Bands (busbw at the large messages / line rate):
    >= HEALTHY        healthy
    >= SUSPECT        below expectation
    <  SUSPECT        suspect: check the transport
    >  FASTER_THAN    suspect: faster than the line rate (wrong rate, or traffic not over this link)
Calibration on this project's emulated fabrics (2 namespaced nodes, tc tbf, torch
gloo allreduce up to 64 MiB, 2 shared cores): at 1 Gbit/s the busbw at 8-64 MiB was
0.89-0.91 of the rate (tbf itself passes 0.93-0.95 of it to TCP): healthy, so the
healthy band starts at 0.85, not 0.9, to keep a healthy link out of the noise; at
5 Gbit/s the CPU-bound gloo reduction reached 0.54-0.67 (p2p 0.91): below expectation.

NCCL's in-switch algorithms reduce in the switch, not over the links: NVLS (NVLink SHARP, in the
NVSwitch), NVLSTree (NVLS within each node, trees between them) and CollNet (SHARP in InfiniBand
switches) put the bus bandwidth above the line-rate model by design. Where NCCL's log shows one
set up (transport.observed.nccl.algorithms) and the run's NCCL_ALGO leaves NCCL free to choose it,
the ceiling is in_switch_ceiling(n) x the model instead of 1 (see there: below 2 at any size); a
busbw between FASTER_THAN x the model and FASTER_THAN x that ceiling is "no sign of trouble" with
the reason (the ceiling is an ideal no run is known to reach, so nothing proves it healthy), and
above it still "faster than the line rate".

A training run has no message sweep: its exposed communication (step time minus
the same step without exchange) implies a bus bandwidth for its gradients.
Overlap with the backward pass hides communication, so that figure is an upper
bound: a low one is solid evidence of trouble; a high one is not proof of health.
"""

from __future__ import annotations

from pathlib import Path

from launch.kinds import kind_of
from launch.kinds.sizes import LARGE_MESSAGE_BYTES, TOP_SIZES  # noqa: F401  (the rule's sizes: launch.kinds.sizes)
from launch.results.result import typed

HEALTHY = 0.85  # 'about 0.9': a well-behaved shaped 1 Gbit/s link measured 0.89-0.91 here (noise margin)
SUSPECT = 0.5
FASTER_THAN = 1.05
BANDS = {"healthy": HEALTHY, "below expectation": SUSPECT, "suspect: check the transport": 0.0}


def band(ratio: float) -> str:
    if ratio > FASTER_THAN:
        return "suspect: faster than the line rate"
    if ratio >= HEALTHY:
        return "healthy"
    if ratio >= SUSPECT:
        return "below expectation"
    return "suspect: check the transport"


def probed_line_rate(env: dict, root: Path = Path("/")) -> tuple[float | None, str | None]:
    """The line rate of the NIC the run's selection variables name, from sysfs."""
    from bench.placement import traffic_nic
    from bench.placement import parse_ib_rate

    name, variable = traffic_nic(env)
    if not name:
        return None, None
    ports = sorted((root / "sys/class/infiniband" / name / "ports").glob("*"))
    for port in ports:
        try:
            rate = parse_ib_rate((port / "rate").read_text())
        except OSError:
            continue
        if rate:
            return rate, f"probe: {name} port {port.name} rate ({variable})"
    try:
        speed = int((root / "sys/class/net" / name / "speed").read_text().strip())
    except (OSError, ValueError):
        return None, f"probe: {name} reports no speed ({variable})"
    if speed <= 0:
        return None, f"probe: {name} reports no speed ({variable})"
    return speed / 1000.0, f"probe: {name} speed ({variable})"


def line_rate(result: dict, site_link_gbit_s: float | None = None, root: Path = Path("/")) -> tuple[float | None, str]:
    if result.get("link_rate_gbit_s"):
        return float(result["link_rate_gbit_s"]), "emulated link rate"
    if site_link_gbit_s:
        return float(site_link_gbit_s), "site file link_gbit_s"
    rate, source = probed_line_rate(result.get("env") or {}, root)
    return rate, source or "no link rate: not emulated, none in the site file, no NIC named to probe"


RAIL_VARIABLES = ("NCCL_IB_HCA", "UCX_NET_DEVICES")  # device lists: one entry per rail


def rails_in_use(result: dict) -> tuple[int, str]:
    """NICs per node the run's traffic can cross at once, and how that was known: the NICs NCCL's
    log says it used; else the rails the run's selection variables list, one per rank on a node
    at most; else one."""
    from launch.results.result import ranks_per_node
    from launch.results.transport import listed_devices

    if result.get("link_rate_gbit_s"):
        return 1, "emulated link"
    nccl = ((result.get("transport") or {}).get("observed") or {}).get("nccl") or {}
    if nccl.get("nics_used"):
        return len(nccl["nics_used"]), "NICs NCCL used (its log)"
    env = result.get("env") or {}
    per_node = ranks_per_node(result) or 1
    for variable in RAIL_VARIABLES:
        listed = len(listed_devices(env.get(variable, "")))
        if listed > 1:
            used = min(listed, per_node)
            return used, f"{variable} lists {listed}, {per_node} rank{'s' if per_node != 1 else ''} per node"
    return 1, "one NIC (none listed)"


# NCCL_ALGO's names for the variants of an algorithm the log names as one ("Connected CollNet" is
# set up for both CollnetDirect and CollnetChain; NCCL < 2.14 called it plain "CollNet")
ALGO_VARIANTS = {"collnet": ("collnet", "collnetdirect", "collnetchain")}


def nccl_algo_allows(value: str | None, algorithm: str) -> bool:
    """Whether NCCL_ALGO leaves NCCL free to choose `algorithm` for an allreduce: unset; a list
    ("Ring,NVLS"); an exclusion ("^NVLS,NVLSTree"); per collective ("allreduce:tree;broadcast:ring",
    NCCL >= 2.24; a collective it does not name keeps its choice). CollNet is allowed where any of
    its variants is ("Ring,CollnetDirect"; "^CollnetChain" leaves CollnetDirect)."""
    text = (value or "").strip()
    if ":" in text:
        parts = {k.strip().lower(): v for k, _, v in (p.partition(":") for p in text.split(";"))}
        text = parts.get("allreduce", "").strip()
    if not text:
        return True
    names = {n.strip().lower() for n in text.lstrip("^").split(",") if n.strip()}
    name = algorithm.lower()
    variants = set(ALGO_VARIANTS.get(name, (name,)))
    if text.startswith("^"):  # excluded by its own name, or every variant of it excluded
        return not (name in names or (variants - {name}) and (variants - {name}) <= names)
    return bool(variants & names)


def in_switch_ceiling(ranks: int | None) -> float:
    """How far above the line-rate model an in-switch reduction can put busbw, for `ranks` ranks.

    The model (nccl-tests' busbw = algbw x 2(n-1)/n; the node's rate = line rate x rails) is what a
    ring or tree moves: each byte crosses a node's links 2(n-1)/n times, so busbw reaches the node's
    rate. A reduction in the switch sends each byte up once and receives the result down once, on
    full-duplex links: algbw can reach the node's rate itself (NVIDIA/nccl#320, the maintainers'
    rule for CollNet: 8 NICs of ~20 GB/s give up to 8 x 20 GB/s of algorithm bandwidth), so busbw
    can reach 2(n-1)/n x the model: 1.0 for 2 ranks, 1.875 for 16, below 2 at any size. nccl-tests
    users see the effect (NVIDIA/nccl-tests#312: NVLS on one H100 node printed ~480 GB/s busbw
    against NVLink's 450). Ranks unknown: the limit, 2."""
    if not ranks or ranks < 2:
        return 2.0
    return max(1.0, 2 * (ranks - 1) / ranks)


def world_ranks(result: dict) -> int | None:
    """The ranks of the run's communicator: the world size its ranks reported, else the spec's."""
    for value in (result.get("world_size"), (result.get("spec") or {}).get("ranks")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def in_switch_algorithms(result: dict) -> list[str]:
    """The in-switch algorithms NCCL set up for the run (its log: transport.observed.nccl.algorithms)
    that the run's NCCL_ALGO leaves it free to choose."""
    nccl = ((result.get("transport") or {}).get("observed") or {}).get("nccl") or {}
    algo = (result.get("env") or {}).get("NCCL_ALGO")
    return [a for a in nccl.get("algorithms") or [] if nccl_algo_allows(algo, a)]


def gpudirect_check(result: dict) -> dict | None:
    """NCCL runs: GPUDirect RDMA asked (--gpudirect) against what NCCL's channels show."""
    spec = result.get("spec") or {}
    nccl = ((result.get("transport") or {}).get("observed") or {}).get("nccl")
    if not nccl or spec.get("gpudirect") is None:
        return None
    observed = nccl.get("gdr")
    seen = {True: "on", False: "off", "partial": "partial", None: None}[observed]  # transport._gdr_of
    return {"asked": spec["gpudirect"], "observed": seen, "ok": None if seen is None else seen == spec["gpudirect"]}


def verdict(result: dict, site_link_gbit_s: float | None = None, root: Path = Path("/")) -> dict:
    """The `plausibility` field of a result: what its kind's rule measured (launch.kinds) against the
    line rate."""
    kind, fields = kind_of(result), typed(result)
    judged = kind.plausibility(fields) if kind is not None and fields is not None else None
    if judged is None or fields is None:
        return {"verdict": "not applicable", "why": f"benchmark {fields.benchmark if fields else None}"}
    rate, source = line_rate(result, site_link_gbit_s, root)
    rails, rails_source = rails_in_use(result)
    out: dict = {
        "link_rate_gbit_s": rate,
        "link_rate_source": source,
        "rails": rails,
        "rails_source": rails_source,
        "node_rate_gbit_s": None if rate is None else rate * rails,
        "bands": {"healthy": HEALTHY, "suspect_below": SUSPECT, "faster_than": FASTER_THAN},
    }
    if fields.status not in ("ok", "transport_mismatch"):
        return {**out, "verdict": "unknown", "why": f"run status {fields.status}"}
    if len(fields.hosts or []) < 2 and not fields.link_rate_gbit_s:
        return {**out, "verdict": "not applicable", "why": "one host: the traffic did not cross the fabric"}
    busbw = judged.busbw_gbit_s
    out.update(measure=judged.measure, busbw_gbit_s=busbw, **(judged.more or {}))
    gdr = gpudirect_check(result)
    if gdr:
        out["gpudirect"] = gdr
    if rate is None or busbw is None:
        out.update(verdict="unknown", why="no line rate" if rate is None else "no bandwidth figure")
        return out
    ratio = busbw / (rate * rails)
    out["ratio"] = ratio
    out["verdict"] = band(ratio)
    in_switch = in_switch_algorithms(result)
    if in_switch:
        ceiling = in_switch_ceiling(world_ranks(result))
        out["in_switch_algorithms"] = in_switch
        out["in_switch_ceiling"] = ceiling
        if out["verdict"] == "suspect: faster than the line rate" and ratio <= FASTER_THAN * ceiling:
            out["verdict"] = "no sign of trouble"
            out["why"] = (
                f"busbw {ratio:.2f} x the line-rate model: NCCL set up {', '.join(in_switch)}, whose reduction "
                f"in the switch puts busbw above the link model by design (up to {ceiling:.2f} x)"
            )
        elif out["verdict"] == "suspect: faster than the line rate":
            out["why"] = (
                f"busbw {ratio:.2f} x the line-rate model: above even {', '.join(in_switch)}'s ceiling "
                f"({ceiling:.2f} x for {world_ranks(result) or 'an unknown number of'} ranks): wrong rate, or "
                "traffic not over this link"
            )
    if judged.upper_bound and out["verdict"] in ("healthy", "suspect: faster than the line rate"):
        out["verdict"] = "no sign of trouble"  # overlap: an upper bound proves nothing good
    if gdr and gdr["ok"] is False:
        out["verdict"] = "suspect: check the transport"
        out["why"] = f"GPUDirect RDMA asked {gdr['asked']}, NCCL ran with it {gdr['observed']}"
    return out
