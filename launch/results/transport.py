"""Transport evidence: which transport actually carried a run's traffic.

Three steps, each a plain function:
- launch.ranks.reporting: the libraries' own reporting, turned on in every rank's
  environment at a level that names the selected component and little else;
- `observe(log)`: the run's output.log in, what the libraries said out;
- `judge(fabric, env, observed, ...)`: what the run asked for (its fabric
  profile's selection variables, or its own environment without a fabric)
  against what it got. A run asked for fabric X that ran over something else
  is a mismatch.

Verbosity, as measured here with Open MPI 4.1.4, UCX 1.13, libfabric 1.17:
`pml_base_verbose` names the pml only at 10 ("selected ob1 best priority 20",
~10 lines per rank); `btl_base_verbose=1` prints one "bml: Using tcp btl for
send to ..." line per peer; `mtl_base_verbose=10` names the MTL and
`mtl_ofi_verbose=1` the libfabric provider ("mtl:ofi:prov: tcp;ofi_rxm");
`UCX_LOG_LEVEL=info` prints each endpoint configuration's lanes
("ep_cfg[1]: tag(tcp/lo tcp/eth0)"). `FI_LOG_LEVEL=info` prints ~300 lines per
rank, so libfabric stays at `warn`; NCCL's INIT,NET subsystems name the network
("Using network IB") and GPUDirect ("via NET/IB/0/GDRDMA").
"""

from __future__ import annotations

import re
from pathlib import Path

from containers.fabrics import profile

# launch.kinds and launch.results.result (pydantic) are imported where a result is read, so that
# reading a log (observe, nccl_rank_nics) needs the standard library only: the GPU check runs it on
# a bare host (benchmarks/gpu_check_steps.py)

# UCX_TLS aliases -> the transport names UCX prints in ep_cfg lanes
UCX_ALIASES = {
    "sm": {"sysv", "posix", "cma", "knem", "xpmem", "memory"},
    "shm": {"sysv", "posix", "cma", "knem", "xpmem", "memory"},
    "rc": {"rc_verbs", "rc_mlx5"},
    "ud": {"ud_verbs", "ud_mlx5"},
    "dc": {"dc_mlx5"},
    "rc_x": {"rc_mlx5"},
    "ud_x": {"ud_mlx5"},
    "dc_x": {"dc_mlx5"},
    "ib": {"rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5"},
    "cuda": {"cuda_copy", "cuda_ipc", "gdr_copy"},
}
# NCCL's "Using network <name>" -> the NCCL_NET value that asks for it. The RDMA
# plugin of HPC-X (nccl-rdma-sharp-plugins) names its verbs transport "IBext" or
# "IBext_v<N>"; aws-ofi-nccl says "AWS Libfabric" (older) or "Libfabric" (newer).
NCCL_NET_NAMES = {
    "socket": "Socket",
    "ib": "IB",
    "ibext": "IB",
    "aws libfabric": "OFI",
    "libfabric": "OFI",
    "ofi": "OFI",
}

_PREFIX = r"^\[[^\]]*\]\s*"  # "[host:pid] " of Open MPI's verbose output
PATTERNS = {
    "pml": re.compile(_PREFIX + r"selected (\w+) best priority"),
    "mtl": re.compile(_PREFIX + r"mca:base:select:\(\s*mtl\) Selected component \[(\w+)\]"),
    "btl": re.compile(_PREFIX + r"mca: bml: Using (\w+) btl for send to"),
    "ofi_provider": re.compile(r"mtl:ofi:prov: (\S+)"),
    "ucx_lanes": re.compile(r"UCX\s+INFO\s+ep_cfg\[\d+\]: (.*)$"),
    "ucx_version": re.compile(r"UCX\s+INFO\s+Version (\S+)"),
    # a log copied from a console may repeat the line after " | "
    "nccl_network": re.compile(r"NCCL INFO Using network (\w[\w .-]*?)\s*(?:\|.*)?$"),
    "nccl_net_devices": re.compile(r"NCCL INFO NET/(IB|Socket|OFI)\s*: Using (.+?)\s*$"),
    # "efa", "efa (found 16 nics)", "efa, fabric is ...", "tcp;ofi_rxm"
    "nccl_ofi_provider": re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is (\w[\w;-]*)"),
    # NCCL >= 2.6 "Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA", <= 2.5 "Ring 00 : ...";
    # NET/<network>/<device>[(<proxy device>)]/<flags>: "NET/IB/1(0)/GDRDMA" is PXN,
    # "NET/AWS Libfabric/1(2)/GDRDMA/Shared" a plugin network with a space in its name
    "nccl_channel": re.compile(
        r"NCCL INFO (?:Channel|Ring) \d+.* via "
        r"(NET/[A-Za-z][\w ]*?/\d+(?:\(\d+\))?(?:/[A-Za-z]\w*)*"
        r"|P2P/\S+|SHM/\S+|direct shared memory)"
    ),
    "nccl_version": re.compile(r"NCCL version (\S+)"),
    # NVLS (NVLink SHARP: the reduction in the NVSwitch) set up on the communicator, printed as NCCL
    # sets up its buffers; NVLSTree: NVLS within each node, trees between them, whose heads NCCL
    # prints ("NVLS Head  0:  0  8") only for a communicator of more than one node
    "nccl_nvls": re.compile(r"NCCL INFO NVLS comm \S+ headRank -?\d+ nHeads \d+"),
    "nccl_nvls_tree": re.compile(r"NCCL INFO NVLS Head\s+\d+:"),
    # CollNet (SHARP in InfiniBand switches, through the SHARP plugin) set up: NCCL prints
    # INFO(NCCL_INIT, "rank %d Connected CollNet") once its CollNet groups are connected (older
    # releases add " comm %p nRanks %02d") and "Connected Collnet Chains ..." for the chain variant.
    # Its channel lines ("CollNet 05/0 : 5 [receive] via COLLNET/SHARP/5/GDRDMA") come before the
    # SHARP group is made and are no proof: a failed group (NVIDIA/nccl#1219) frees CollNet again
    "nccl_collnet": re.compile(r"NCCL INFO (?:rank \d+ Connected CollNet\b|Connected Collnet Chains)"),
    "nccl_collnet_channel": re.compile(r"NCCL INFO CollNet \d+(?:/\d+)? : .* via (COLLNET/\S+)"),
    # NCCL or its SHARP plugin giving an in-switch algorithm up ("CollNet is not supported or fails
    # to initialize, ignoring NCCL_ALGO=COLLNET", "SHARP group create: Streaming Tree lock failed")
    "nccl_in_switch_warning": re.compile(r"NCCL WARN (.*(?:SHARP|CollNet|COLLNET|NVLS).*?)\s*$"),
}
# algorithms NCCL set up whose reduction is done in the switch, not by the GPUs over the links:
# their bus bandwidth exceeds the link model by design (launch.results.plausibility)
ALGORITHMS = {"nccl_nvls": "NVLS", "nccl_nvls_tree": "NVLSTree", "nccl_collnet": "CollNet"}
MAX_LINES = 12  # evidence lines kept verbatim in the result
_NET_CHANNEL = re.compile(r"NET/(.+?)/(\d+)(\(\d+\))?(/|$)")  # network, device, proxy device


def _nic_count(devices: str) -> int:
    """'IB: [0]mlx5_8:1/IB [1]mlx5_9:1/IB ; OOB ...' -> 2; merged NICs '[0]={[0] a, [1] b} [1]={...}' -> 2."""
    listed = re.sub(r"\{[^}]*\}", "", devices.split(";")[0])
    return len(re.findall(r"\[\d+\]", listed))


def nccl_network_kind(name: str) -> str:
    """'IBext_v8' -> 'IB', 'AWS Libfabric' -> 'OFI', 'Socket' -> 'Socket': the NCCL_NET value
    naming the same transport; an unknown name stays as it is."""
    key = re.sub(r"_v\d+$", "", name.strip().lower())
    return NCCL_NET_NAMES.get(key, name)


def _ucx_transports(lanes: str) -> set[str]:
    """'tag(self/memory0 tcp/lo tcp/eth0) rma(...)' -> {'self/memory0', 'tcp/lo', 'tcp/eth0'}."""
    return set(re.findall(r"([\w]+/[\w:.\-]+)", lanes))


def observe(log: str) -> dict:
    """What the libraries reported in a run's output; empty layers are left out."""
    seen: dict[str, set[str]] = {}
    lines: list[str] = []
    for line in log.splitlines():
        for kind, pattern in PATTERNS.items():
            match = pattern.search(line)
            if not match:
                continue
            if kind == "ucx_lanes":
                values = _ucx_transports(match.group(1))
            elif kind == "nccl_net_devices":
                values = {f"{match.group(1)}: {match.group(2)}"}
            elif kind in ALGORITHMS:
                if kind in seen:  # one evidence line per algorithm: every rank prints its own
                    continue
                values = {ALGORITHMS[kind]}
            else:
                values = {match.group(1)}
            seen.setdefault(kind, set()).update(values)
            if len(lines) < MAX_LINES and kind not in ("ucx_version", "nccl_version"):
                lines.append(line.strip()[:300])
    observed: dict = {}
    mpi: dict[str, list[str]] = {k: sorted(seen[k]) for k in ("pml", "mtl", "ofi_provider") if k in seen}
    if "btl" in seen:
        mpi["btl"] = sorted(seen["btl"] - {"self"}) or ["self"]
    if mpi:
        observed["mpi"] = mpi
    if "ucx_lanes" in seen:
        lanes = seen["ucx_lanes"]
        observed["ucx"] = {
            "lanes": sorted(lanes),
            "transports": sorted({t.split("/")[0] for t in lanes} - {"self"}),
            "version": _lowest(seen.get("ucx_version")),
        }
    in_switch_tried = ("nccl_collnet_channel", "nccl_in_switch_warning")
    if seen.keys() & {
        "nccl_network",
        "nccl_net_devices",
        "nccl_ofi_provider",
        "nccl_channel",
        *ALGORITHMS,
        *in_switch_tried,
    }:
        channels = seen.get("nccl_channel", set())
        net_channels = [c for c in channels if c.startswith("NET/")]
        net_hops = [hop for c in net_channels if (hop := _NET_CHANNEL.match(c))]
        # NCCL <= 2.5 prints no "Using network": the NET channels name it
        network = seen.get("nccl_network") or {hop.group(1) for hop in net_hops}
        offered = [_nic_count(d) for d in seen.get("nccl_net_devices", set())]
        used = sorted({int(hop.group(2)) for hop in net_hops})
        observed["nccl"] = {
            "network": sorted(network),
            # NICs NCCL offered ("NET/IB : Using [0]... [1]...", the most any rank listed) and the
            # NET devices its channels used (across the ranks whose channel lines were logged)
            "nics_offered": max(offered) if offered else None,
            "nics_used": used if net_channels else None,
            "devices": sorted(seen.get("nccl_net_devices", set())),
            "ofi_provider": sorted(seen.get("nccl_ofi_provider", set())),
            "channels": sorted(channels),
            # GPUDirect RDMA per NET channel: True all, False none, "partial" some (one side only
            # reads as "on" with any(), which is how a half-disabled GDR hid)
            "gdr": _gdr_of(net_channels),
            # PXN: a NET channel through another GPU's NIC, "NET/IB/1(0)/..."
            "pxn": (any(hop.group(3) for hop in net_hops) if net_channels else None),
            "version": _lowest(seen.get("nccl_version")),
            # in-switch algorithms NCCL set up (NVLS, NVLSTree); its tuner picks per operation
            # among them and ring/tree, and NCCL_ALGO can rule them out
            "algorithms": sorted(set().union(*(seen.get(kind, set()) for kind in ALGORITHMS))),
            # CollNet channels NCCL connected (tried: not proof of CollNet set up) and what NCCL or
            # the SHARP plugin warned as it gave an in-switch algorithm up
            "collnet_channels": sorted(seen.get("nccl_collnet_channel", set())),
            "in_switch_warnings": sorted(seen.get("nccl_in_switch_warning", set()))[:MAX_LINES],
        }
    observed["lines"] = lines
    return observed


def _lowest(versions: set[str] | None) -> str | None:
    return min(versions) if versions else None


def _gdr_of(net_channels: list[str]) -> bool | str | None:
    flags = {"/GDRDMA" in c for c in net_channels}
    return None if not flags else ("partial" if len(flags) == 2 else flags.pop())


def asked_for(fabric: str | None, env: dict[str, str], nccl: bool, mpi_gpu: bool = False) -> dict[str, str]:
    """Selection variables the run asked for: its fabric profile's, else its own env's."""
    if fabric:
        asked = dict(profile(fabric).env)
        if nccl:
            asked |= profile(fabric).nccl_env
        # GPUDirect follows the run's own choice (the profile has on and off), and so does what lets
        # its MPI carry GPU buffers (mpi_gpu_env), only where the run hands them to MPI (`mpi_gpu`):
        # elsewhere a variable of it in the env is the user's own, not the fabric's (Ethernet's
        # OMPI_MCA_pml=ucx forced on a CPU run is a mismatch)
        chosen = (*profile(fabric).gpudirect_env.values(), *(profile(fabric).mpi_gpu_env.values() if mpi_gpu else ()))
        for name in {k for v in chosen for k in v}:
            if name in env:
                asked[name] = env[name]
    else:
        asked = dict(env)
    keys = (
        "OMPI_MCA_pml",
        "OMPI_MCA_btl",
        "OMPI_MCA_mtl",
        "OMPI_MCA_mtl_ofi_provider_include",
        "UCX_TLS",
        "NCCL_NET",
        "NCCL_IB_DISABLE",
        "NCCL_NET_GDR_LEVEL",
        "UCX_IB_GPU_DIRECT_RDMA",
        "PSM2_GPUDIRECT",
        "FI_HMEM_CUDA_USE_GDRCOPY",
    )
    return {k: asked[k] for k in keys if k in asked}


def _btl_allowed(spec: str, btl: str) -> bool:
    names = {n.strip() for n in spec.lstrip("^").split(",")}
    return (btl not in names) if spec.startswith("^") else (btl in names)


def _ucx_allowed(spec: str, transport: str) -> bool:
    names = {n.strip() for n in spec.lstrip("^").split(",")}
    if "all" in names or "any" in names:
        return not spec.startswith("^")
    expanded = set(names).union(*(UCX_ALIASES.get(n, set()) for n in names))
    return (transport not in expanded) if spec.startswith("^") else (transport in expanded)


def gradient_path(result: dict) -> str | None:
    """nccl | mpi | gloo: the library that carried a training run's gradients."""
    info = result.get("engine_info") or {}
    if result.get("engine") == "ddp":
        return info.get("backend")
    if result.get("engine") == "horovod":
        spec = result.get("spec") or {}
        gpu_ops = info.get("gpu_ops") or ("nccl" if info.get("nccl_built") else None)
        if (spec.get("gpus_per_node") or 0) > 0 and gpu_ops in ("nccl", "mpi"):
            return gpu_ops  # its GPU operations, fixed in its build (the second build's are MPI's)
        return (result.get("env") or {}).get("HOROVOD_CPU_OPERATIONS") or info.get("controller")
    return None


def gpu_buffer_library(result: dict) -> tuple[str | None, str]:
    """The library that moved a GPU run's device buffers (nccl | gloo | mpi), and how that is known;
    (None, why) for a CPU run or where the ranks did not say. Horovod's GPU operations are fixed
    when it is built (HOROVOD_GPU_OPERATIONS): with NCCL built they are NCCL whatever
    HOROVOD_CPU_OPERATIONS (--allreduce mpi|gloo) says."""
    spec = result.get("spec") or {}
    if not (spec.get("gpus_per_node") or 0):
        return None, "no GPUs: host buffers"
    from launch.kinds import kind_of
    from launch.results.result import typed

    info = result.get("engine_info") or result.get("backend_info") or {}
    kind, fields = kind_of(result), typed(result)
    engine = kind.gpu_engine(fields) if kind is not None and fields is not None else result.get("engine")
    if engine == "ddp":
        backend = info.get("backend") or info.get("process_group")
        return backend, f"torch.distributed process group ({backend})"
    if engine == "horovod":
        gpu_ops = info.get("gpu_ops") or ("nccl" if info.get("nccl_built") else None)
        if gpu_ops == "nccl":
            return "nccl", "Horovod's GPU operations (built with NCCL; --allreduce sets only its CPU operations)"
        if gpu_ops == "mpi":
            return "mpi", f"Horovod's GPU operations (built with MPI: {info.get('horovod_build') or 'its MPI build'})"
        return None, "Horovod built without NCCL or MPI GPU operations: not known to the bundle"
    if engine == "native":  # tf.distribute: CollectiveCommunication NCCL on GPUs
        collectives = info.get("collectives")
        return ("nccl" if collectives == "nccl" else collectives), f"tf.distribute collectives ({collectives})"
    if engine == "mpi":
        buffers = str(info.get("buffers") or "host")  # before device buffers: host, unsaid
        if buffers.startswith("cuda"):
            return "mpi", f"mpi4py on device buffers ({buffers}) handed to a CUDA-aware MPI"
        return "mpi", "mpi4py on host (numpy) buffers"
    return None, "the ranks did not say"


def gpu_buffers(result: dict, observed: dict) -> dict | None:
    """`transport.gpu_buffers`: which library moved the GPU buffers, how that is known, and whether
    the run's own output confirms it (NCCL's lines in the log where it was NCCL)."""
    library, source = gpu_buffer_library(result)
    if library is None and source.startswith("no GPUs"):
        return None
    nccl_seen = bool(observed.get("nccl"))
    moved: dict[str, object] = {
        "library": library,
        "source": source,
        "nccl_in_log": nccl_seen,
        "confirmed": (nccl_seen if library == "nccl" else None),
    }
    if library == "nccl":  # GPUDirect RDMA per NET channel, as NCCL's log says
        moved["path"] = {"gpudirect_rdma": (observed.get("nccl") or {}).get("gdr")}
    if library == "mpi":
        path = mpi_gpu_path(result.get("env") or {}, observed)
        used = path["ucx_gpu_transports"]
        moved |= {"path": path, "confirmed": None if used is None else bool(used)}
    return moved


def mpi_gpu_path(env: dict, observed: dict) -> dict:
    """How a CUDA-aware MPI moved GPU buffers: the CUDA transports UCX's endpoints used (their lanes in
    the log; None: no UCX lanes seen), what the run allowed (UCX_TLS) and asked of GPUDirect RDMA
    (UCX_IB_GPU_DIRECT_RDMA: yes fails the device where the HCA cannot read GPU memory), and the path
    that follows: gpudirect-rdma (asked yes: nothing else passes), gpu-copies (cuda_ipc or gdr_copy
    lanes: GPU to GPU within a node, or the CPU mapping GPU memory), staged (cuda_copy alone: every
    transfer through host memory), unknown."""
    ucx = observed.get("ucx")
    used = sorted(t for t in (ucx or {}).get("transports", []) if t in UCX_ALIASES["cuda"]) if ucx else None
    rdma = env.get("UCX_IB_GPU_DIRECT_RDMA")
    if rdma in ("yes", "y", "1", "on"):
        path = "gpudirect-rdma"
    elif used and set(used) & {"cuda_ipc", "gdr_copy"}:
        path = "gpu-copies"
    elif used:
        path = "staged"
    else:
        path = "unknown"
    return {"ucx_gpu_transports": used, "ucx_tls": env.get("UCX_TLS"), "gpudirect_rdma_asked": rdma, "path": path}


# the run's in-switch settings (RunSpec.nvls, .sharp), the NCCL variable each sets, the algorithms
# NCCL's log names when it set them up, and what it takes for NCCL to set one up at all: NVLS needs
# several GPUs of a node on one NVSwitch, CollNet at least NCCL_COLLNET_NODE_THRESHOLD (2) nodes
IN_SWITCH = (
    ("nvls", "NCCL_NVLS_ENABLE", ("NVLS", "NVLSTree"), "ranks_per_node"),
    ("sharp", "NCCL_COLLNET_ENABLE", ("CollNet",), "nodes"),
)


def in_switch(result: dict, observed: dict) -> dict:
    """`transport.in_switch` of a GPU result: for NVLS and SHARP, what the run asked (its spec's
    setting, else the variable in its environment, else NCCL's default), the variable's value, and
    what NCCL's log says it set up (None where the log has no NCCL INFO lines to say it)."""
    from launch.results.result import ranks_per_node

    spec, env = result.get("spec") or {}, result.get("env") or {}
    nccl = observed.get("nccl") or {}
    logged = any(nccl.get(k) for k in ("network", "channels", "algorithms", "collnet_channels"))
    setup = set(nccl.get("algorithms") or [])
    room = {
        "ranks_per_node": ranks_per_node(result) or 1,
        "nodes": len(result.get("hosts") or []) or spec.get("nodes") or 1,
    }
    out = {}
    for name, variable, algorithms, needs in IN_SWITCH:
        value = env.get(variable)
        asked = spec.get(name) or {"1": "on", "0": "off"}.get(str(value), "default")
        out[name] = {
            "asked": asked,
            variable: value,
            "set_up": sorted(setup & set(algorithms)) if logged else None,
            # whether the run could have it at all: a single node has no CollNet, a GPU alone no NVLS
            "possible": room[needs] > 1,
        }
    return out


def listed_devices(value: str) -> list[str]:
    """The devices a selection list names ("=mlx5_0,mlx5_1", "mlx5_0:1,mlx5_1:1"); [] for none
    or an exclusion list ("^mlx5_2")."""
    value = str(value or "").strip()
    if not value or value.startswith("^"):
        return []
    return [d.strip() for d in value.lstrip("=").split(",") if d.strip()]


def judge(
    fabric: str | None,
    env: dict[str, str],
    observed: dict,
    path: str | None = None,
    nccl: bool = False,
    gpus_per_node: int = 0,
    ranks_per_node: int | None = None,
) -> dict:
    """Checks of asked against observed; verdict match | mismatch | unverified."""
    asked = asked_for(fabric, env, nccl, mpi_gpu=gpus_per_node > 0 and path == "mpi")
    mpi, ucx, nccl_seen = observed.get("mpi", {}), observed.get("ucx"), observed.get("nccl")
    checks: list[dict] = []

    def check(layer: str, want: str, got: list[str], ok: bool) -> None:
        checks.append({"layer": layer, "asked": want, "observed": got, "ok": ok})

    if "OMPI_MCA_pml" in asked and "pml" in mpi:
        want = asked["OMPI_MCA_pml"]
        check("mpi.pml", want, mpi["pml"], all(_btl_allowed(want, p) for p in mpi["pml"]))
    if "OMPI_MCA_btl" in asked and "btl" in mpi:
        want = asked["OMPI_MCA_btl"]
        check("mpi.btl", want, mpi["btl"], all(_btl_allowed(want, b) for b in mpi["btl"]))
    if "OMPI_MCA_mtl" in asked and "mtl" in mpi:
        want = asked["OMPI_MCA_mtl"]
        check("mpi.mtl", want, mpi["mtl"], all(_btl_allowed(want, m) for m in mpi["mtl"]))
    if "OMPI_MCA_mtl_ofi_provider_include" in asked and "ofi_provider" in mpi:
        want = asked["OMPI_MCA_mtl_ofi_provider_include"]
        providers = {p for chain in mpi["ofi_provider"] for p in chain.split(";")}
        check("libfabric.provider", want, mpi["ofi_provider"], want in providers)
    if "UCX_TLS" in asked and ucx:
        want = asked["UCX_TLS"]
        check("ucx.transports", want, ucx["transports"], all(_ucx_allowed(want, t) for t in ucx["transports"]))
    if nccl_seen and nccl_seen["network"]:
        got = {nccl_network_kind(n) for n in nccl_seen["network"]}
        wanted_net = asked.get("NCCL_NET") or ("Socket" if asked.get("NCCL_IB_DISABLE") == "1" else None)
        if wanted_net:
            check("nccl.network", wanted_net, list(nccl_seen["network"]), got == {nccl_network_kind(wanted_net)})
    if nccl_seen and nccl_seen["gdr"] is not None and "NCCL_NET_GDR_LEVEL" in asked:
        want_on = asked["NCCL_NET_GDR_LEVEL"] != "LOC"
        seen_gdr = {True: "on", False: "off"}.get(nccl_seen["gdr"], "on in only some NET channels")
        check("nccl.gdr", "on" if want_on else "off", [seen_gdr], nccl_seen["gdr"] is want_on)
    if nccl_seen and nccl_seen.get("nics_used") and gpus_per_node > 0:
        # an 8-rail node where NCCL used one NIC still "matches" by network name: count them.
        # The node's NICs: the site's rail list (NCCL_IB_HCA "=a,b,...") or what NCCL offered.
        listed = len(listed_devices(env.get("NCCL_IB_HCA", "")))
        node_nics = listed or nccl_seen.get("nics_offered") or 0
        # one NIC per GPU that runs a rank: a node of 8 GPUs running 4 ranks drives 4 NICs
        gpus_in_use = min(gpus_per_node, ranks_per_node or gpus_per_node)
        expected = min(node_nics, gpus_in_use)
        used = len(nccl_seen["nics_used"])
        if expected:
            check(
                "nccl.nics",
                f"{expected} of {node_nics} NICs (one per GPU in use, {gpus_in_use} per node)",
                [f"{used} NIC{'s' if used != 1 else ''} (NET devices {', '.join(map(str, nccl_seen['nics_used']))})"],
                used >= expected,
            )
    if fabric and profile(fabric).control and nccl_seen and nccl_seen["network"]:
        # the universal image bakes NCCL_NET_PLUGIN=ofi: on an InfiniBand host NCCL then runs
        # over libfabric's verbs provider instead of its own IB transport. Say so.
        providers = {p for chain in nccl_seen.get("ofi_provider", []) for p in chain.split(";")}
        via_ofi = {nccl_network_kind(n) for n in nccl_seen["network"]} == {"OFI"}
        if via_ofi and any(p.startswith("verbs") for p in providers):
            check(
                "nccl.network",
                "IB (NCCL's own verbs transport on an InfiniBand host)",
                [f"{', '.join(nccl_seen['network'])} over {', '.join(sorted(providers))}"],
                False,
            )
    if path == "gloo" and fabric and not profile(fabric).sockets:  # emu-eth-*: ethernet
        check("gradients", str(fabric), ["gloo (TCP sockets)"], False)
    failed = [c for c in checks if not c["ok"]]
    verdict = "mismatch" if failed else ("match" if checks else "unverified")
    return {
        "fabric": fabric,
        "asked": asked,
        "gradient_path": path,
        "checks": checks,
        "verdict": verdict,
        "mismatches": [f"{c['layer']}: asked {c['asked']}, ran over {', '.join(c['observed'])}" for c in failed],
    }


# [host:pid:tid] [cudaDev], after whatever a console put before it ("  | <time> | ", "[rank0]:")
_LINE_ORIGIN = re.compile(r"(?:([^\s:|\]]+):(\d+):\d+)?\s*\[\d+\] NCCL INFO ")
_NET_LIST = re.compile(r"NCCL INFO NET/(IB|Socket)\s*: Using (.+?)(?:;|$)")
_IB_MERGED = re.compile(r"\[(\d+)\]=\{([^}]*)\}")  # "[1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE}"
_IB_ENTRY = re.compile(r"\[(\d+)\]\s*([A-Za-z][\w.\-]*)")
# aws-ofi-nccl groups the NICs of each accelerator into one NET device: "NIC group 7 device #0 0000:a3:00.0"
_OFI_GROUP = re.compile(
    r"NCCL INFO NET/OFI NIC group (\d+) device #\d+ ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)"
)
_CHANNEL_HOP = re.compile(
    r"NCCL INFO (?:Channel|Ring) \d+\S*\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\]\s*"
    r"\[(send|receive)\] via NET/([A-Za-z][\w ]*?)/(\d+)"
)


def _ib_devices(listing: str) -> dict[int, str]:
    """'[0]mlx5_8:1/IB [1]mlx5_9:1/IB' -> {0: 'mlx5_8', 1: 'mlx5_9'}; a merged virtual NIC
    '[1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE}' -> {1: 'mlx5_0+mlx5_1'}."""
    merged = {
        int(i): "+".join(name for _, name in _IB_ENTRY.findall(inner)) for i, inner in _IB_MERGED.findall(listing)
    }
    return merged or {int(i): name for i, name in _IB_ENTRY.findall(listing)}


def nccl_device_names(log: str) -> dict[tuple[str, str], dict[str, dict[int, list[str]]]]:
    """(host, pid) -> network kind (IB, Socket, OFI) -> NET device -> its NICs, from the lists NCCL
    prints: "NET/IB : Using [0]mlx5_0:1/IB ..." (IB and its plugins), "NET/Socket : Using
    [0]eth0:..." (Socket), and aws-ofi-nccl's "NET/OFI NIC group <dev> device #k <PCI address>"
    (OFI: the group's NICs, by PCI address)."""
    lists: dict[tuple[str, str], dict[str, dict[int, list[str]]]] = {}
    for line in log.splitlines():
        origin = _LINE_ORIGIN.search(line)
        if not origin:
            continue
        named = lists.setdefault((origin.group(1) or "", origin.group(2) or ""), {})
        if listing := _NET_LIST.search(line):
            named[listing.group(1)] = {i: [name] for i, name in _ib_devices(listing.group(2)).items()}
        elif group := _OFI_GROUP.search(line):
            named.setdefault("OFI", {}).setdefault(int(group.group(1)), []).append(group.group(2).lower())
    return {where: named for where, named in lists.items() if named}


def nccl_rank_nics(log: str) -> dict[int, list[str]]:
    """Rank -> the NICs its NET channels used, from NCCL's own lines: a channel line "A[..] -> B[..]
    [send] via NET/<network>/<dev>" is rank A's, "[receive]" rank B's; <dev> is named by the list
    the same process (host:pid) printed, else its host's (nccl_device_names). A device no list
    names is "<network>/<dev>": used, but where it sits the log does not say."""
    lists = nccl_device_names(log)
    used: dict[int, set[str]] = {}
    for line in log.splitlines():
        origin, hop = _LINE_ORIGIN.search(line), _CHANNEL_HOP.search(line)
        if not (origin and hop):
            continue
        host, pid = origin.group(1) or "", origin.group(2) or ""
        rank = int(hop.group(1) if hop.group(3) == "send" else hop.group(2))
        network, kind, device = hop.group(4), nccl_network_kind(hop.group(4)), int(hop.group(5))
        names = lists.get((host, pid), {}).get(kind) or next(
            (v[kind] for (h, _), v in lists.items() if h == host and kind in v), {}
        )
        used.setdefault(rank, set()).update(names.get(device) or [f"{network}/{device}"])
    return {rank: sorted(names) for rank, names in sorted(used.items())}


def run_log(log_path: Path) -> str:
    """A run's output.log, and a batch job's slurm-<id>.out beside it (where its ranks print)."""
    log = ""
    for source in [Path(log_path), *sorted(Path(log_path).parent.glob("slurm-*.out"))]:
        try:
            log += source.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return log


def evidence(result: dict, log_path: Path) -> dict:
    """The `transport` field of a result: observed, checked against what was asked."""
    from launch.results.result import ranks_per_node

    log = run_log(log_path)
    spec = result.get("spec") or {}
    observed = observe(log)
    path = gradient_path(result)
    verdict = judge(
        spec.get("fabric"),
        result.get("env") or {},
        observed,
        path,
        nccl=path == "nccl",
        gpus_per_node=spec.get("gpus_per_node") or 0,
        ranks_per_node=ranks_per_node(result),
    )
    moved = gpu_buffers(result, observed)
    switch = in_switch(result, observed) if moved else None
    for name, seen in (switch or {}).items():
        if seen["asked"] == "on" and seen["possible"] and seen["set_up"] == []:
            # asked for on, NCCL's log is there and names no set-up: like GPUDirect asked and not used
            verdict["checks"].append({"layer": f"nccl.{name}", "asked": "on", "observed": ["not set up"], "ok": False})
            verdict["mismatches"].append(f"nccl.{name}: asked on, NCCL's log shows it not set up")
            verdict["verdict"] = "mismatch"
    asked = spec.get("allreduce")
    if moved and moved["library"] and asked and moved["library"] != asked:
        # e.g. an older Horovod run with --allreduce mpi on GPUs: NCCL moved the gradients all the same
        check = {"layer": "gpu_buffers", "asked": asked, "observed": [moved["library"]], "ok": False}
        verdict["checks"].append(check)
        verdict["mismatches"].append(f"gpu_buffers: asked {asked}, ran over {moved['library']} ({moved['source']})")
        verdict["verdict"] = "mismatch"
    return {**verdict, "gpu_buffers": moved, "in_switch": switch, "observed": observed}


def fields(result: dict, log_path: Path) -> dict:
    """What the transport check contributes to a result (launch.results.assemble.build): its
    `transport` record; an `ok` run over the wrong transport becomes `transport_mismatch` with the
    reason."""
    found = evidence(result, log_path)
    if not (found["mismatches"] and result.get("status") == "ok"):
        return {"transport": found}
    fabric = found["fabric"] or "the run's own selection"
    return {
        "transport": found,
        "status": "transport_mismatch",
        "reason": f"asked for {fabric} but " + "; ".join(found["mismatches"]),
    }
