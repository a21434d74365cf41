"""Emulated clusters (their lifecycle): N nodes on one machine, joined by shaped links.

Each node is a network namespace `fbemu-<cluster>-n<i>` with one interface,
`fbemu0`, on 10.213.0.0/24. Its veth peer sits in a switch namespace
`fbemu-<cluster>-sw` on a Linux bridge, so the subnet, the bridge and every
veth exist only inside namespaces this module creates: tearing a cluster down
is deleting its namespaces. Each node's link is shaped in both directions with
tc tbf (burst = rate x 3 ms). There is no netem on the machines this project
targets, so latency is NOT emulated: only bandwidth is.

Ranks run inside the namespaces under Open MPI: mpirun itself runs in node 0
(with the node's name as hostname, so Open MPI sees that node as local) and
starts the daemons of the other nodes through `netns_rsh_agent.sh` in place of
ssh. A cluster made by `fabric-bench emulate up` outlives runs; a run that finds
none matching makes its own and removes it afterwards, also on failure, Ctrl-C
or SIGTERM. A cluster whose owner died is a leftover: runs refuse to start
until `fabric-bench emulate down --all` removed it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Iterator, NoReturn

from launch.fleet.emulate.faults import Faults
from launch.errors import UsageError
from launch.shapes import LinkRate

PREFIX = "fbemu-"


IFNAME = "fbemu0"  # every node's interface, inside its namespace


SUBNET = "10.213.0"  # .0/24; node i is .i+1


BURST_S = 0.003  # tbf burst = rate x 3 ms (below that, tbf undershoots the rate)


QUEUE_S = 0.010  # tbf queue beyond the burst: 10 ms at the link rate


MIN_BURST_BYTES = 128 * 1024  # at least two 64 KiB GSO packets


DEFAULT_CLUSTER = "main"  # the name `emulate up` uses unless told otherwise


STATE_DIR = Path("/run/fabric-bench/emulate")  # tmpfs: vanishes with the namespaces on reboot


AGENT = Path(__file__).with_name("netns_rsh_agent.sh")


_NAME = re.compile(r"^[a-z0-9]{1,16}$")


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: int
    rate_bit_s: LinkRate | None  # None: unshaped
    persistent: bool = False  # made by `emulate up`: runs use it and leave it up
    faults: Faults = Faults()  # planted degradations (launch.fleet.emulate.faults)
    slurm: bool = False  # a slurmd per node and slurmctld on the bridge (launch.fleet.emulate.slurm_nodes)

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.name}-sw"

    def node(self, i: int) -> str:
        return f"{PREFIX}{self.name}-n{i}"

    @property
    def namespaces(self) -> list[str]:
        return [self.switch] + [self.node(i) for i in range(self.nodes)]

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i + 1}"


def run_tool(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1]
        raise UsageError(f"emulation: `{' '.join(argv)}` failed: {detail}")
    return proc


def require_root() -> None:
    if os.geteuid() != 0:
        raise UsageError("emulated clusters need root (network namespaces and tc); run as root")
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            raise UsageError(f"emulated clusters need `{tool}` (iproute2 / util-linux), not found on PATH")


def tbf_args(rate_bit_s: LinkRate) -> list[str]:
    """tc's tbf at a rate (a shape: whole bits per second within bounds, launch.shapes.link_rate)."""
    rate_bytes_s = rate_bit_s / 8
    burst = max(int(rate_bytes_s * BURST_S), MIN_BURST_BYTES)
    limit = burst + int(rate_bytes_s * QUEUE_S)
    return ["tbf", "rate", str(rate_bit_s), "burst", str(burst), "limit", str(limit)]


def up(cluster: Cluster, owner_pid: int | None = None) -> Cluster:
    """Create the namespaces, bridge, veths, addresses and shaping; undone on any failure."""
    require_root()
    if set(cluster.namespaces) & set(namespaces()):
        raise UsageError(
            f"emulated cluster {cluster.name!r} exists already; "
            f"remove it with `fabric-bench emulate down {cluster.name}`"
        )
    write_state(cluster, owner_pid)
    try:
        sw = cluster.switch
        run_tool("ip", "netns", "add", sw)
        run_tool("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        run_tool("ip", "-n", sw, "link", "set", "br0", "up")
        for i in range(cluster.nodes):
            node = cluster.node(i)
            run_tool("ip", "netns", "add", node)
            run_tool("ip", "-n", sw, "link", "add", f"n{i}", "type", "veth", "peer", "name", IFNAME, "netns", node)
            run_tool("ip", "-n", sw, "link", "set", f"n{i}", "master", "br0", "up")
            run_tool("ip", "-n", node, "addr", "add", f"{cluster.address(i)}/24", "dev", IFNAME)
            run_tool("ip", "-n", node, "link", "set", IFNAME, "up")
            run_tool("ip", "-n", node, "link", "set", "lo", "up")
            shape(cluster, i)
    except BaseException:
        down(cluster.name)
        raise
    return cluster


def shape(cluster: Cluster, i: int) -> None:
    """Node i's link: tbf at its rate node -> switch and switch -> node; a slow node's egress
    at its slower rate; a degraded pair's traffic in an htb class of its own (launch.fleet.emulate.faults)."""
    node, sw = cluster.node(i), cluster.switch
    rate = cluster.faults.node_rate(i, cluster.rate_bit_s)
    egress = cluster.faults.egress_rate(i, rate)
    if rate:  # switch -> node
        run_tool("tc", "-n", sw, "qdisc", "replace", "dev", f"n{i}", "root", *tbf_args(rate))
    peers = cluster.faults.degraded_peers(i)
    if peers and egress:
        for argv in htb_argv(egress, [(cluster.address(j), r) for j, r in peers]):
            run_tool("tc", "-n", node, *argv)
    elif egress:
        run_tool("tc", "-n", node, "qdisc", "replace", "dev", IFNAME, "root", *tbf_args(egress))


def htb_argv(rate_bit_s: LinkRate, slow: list[tuple[str, LinkRate]]) -> list[list[str]]:
    """tc commands (after `tc -n NS`) shaping a node's egress with htb: class 1:1 at its rate for
    all traffic, and one class per degraded peer address at that pair's rate (u32 on dst)."""

    def cls(minor: int, rate: LinkRate) -> list[str]:
        burst = str(max(int(rate / 8 * BURST_S), MIN_BURST_BYTES))
        return [
            "class",
            "add",
            "dev",
            IFNAME,
            "parent",
            "1:",
            "classid",
            f"1:{minor}",
            "htb",
            "rate",
            str(rate),
            "ceil",
            str(rate),
            "burst",
            burst,
            "cburst",
            burst,
            "quantum",
            "60000",
        ]

    argv = [["qdisc", "replace", "dev", IFNAME, "root", "handle", "1:", "htb", "default", "1"], cls(1, rate_bit_s)]
    for k, (address, rate) in enumerate(slow, start=2):
        argv += [
            cls(k, rate),
            [
                "filter",
                "add",
                "dev",
                IFNAME,
                "parent",
                "1:",
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                "dst",
                f"{address}/32",
                "flowid",
                f"1:{k}",
            ],
        ]
    return argv


def process_running(pid: int) -> bool:
    """Alive and not a zombie (a daemon spawned and never waited for stays one until its
    parent, or init, reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_processes(pids: list[int], timeout_s: float) -> list[int]:
    """SIGTERM each (in order), wait up to timeout_s in all, then SIGKILL; returns those that ran."""
    was_running = [pid for pid in pids if process_running(pid)]
    for pid in was_running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in was_running:
        while process_running(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.1)
        if process_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    return was_running


def down(name: str) -> list[str]:
    """Remove every namespace of cluster `name` (killing what still runs in them), the daemons
    and host interface its state records (launch.fleet.emulate.slurm_nodes), and its state."""
    state = read_state(name) or {}
    daemons = state["daemons"] if isinstance(state.get("daemons"), dict) else {}
    stop_processes([pid for pid in daemons.values() if isinstance(pid, int) and pid > 1], 15)
    if state.get("host_interface") in ("fbemu-slurm",):  # the only one a state may name
        run_tool("ip", "link", "del", state["host_interface"], check=False)
    removed = []
    for ns in namespaces():
        if cluster_of(ns) != name:
            continue
        pids = run_tool("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:  # only processes inside a namespace this module made
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run_tool("ip", "netns", "del", ns, check=False)
        removed.append(ns)
    with contextlib.suppress(FileNotFoundError):
        state_path(name).unlink()
    return removed


def namespaces() -> list[str]:
    """Names of this module's namespaces (`ip netns list`)."""
    if shutil.which("ip") is None:
        return []
    listing = run_tool("ip", "netns", "list", check=False).stdout.splitlines()
    return [line.split()[0] for line in listing if line.startswith(PREFIX)]


def cluster_of(namespace: str) -> str:
    return namespace[len(PREFIX) :].rsplit("-", 1)[0]


def state_path(name: str) -> Path:
    return STATE_DIR / f"{name}.json"


def write_state(cluster: Cluster, owner_pid: int | None) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state = {**dataclasses.asdict(cluster), "owner_pid": owner_pid, "created_unix": time.time()}
    state_path(cluster.name).write_text(json.dumps(state) + "\n", encoding="utf-8")


def read_state(name: str) -> dict | None:
    try:
        return json.loads(state_path(name).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Status:
    name: str
    namespaces: tuple[str, ...]
    cluster: Cluster | None  # None when its state file is gone
    owner_pid: int | None

    @property
    def leftover(self) -> bool:
        """Made by a run whose process is gone (or of unknown origin)."""
        if self.cluster is None:
            return True
        return not self.cluster.persistent and not alive(self.owner_pid)


def status() -> list[Status]:
    names = sorted({cluster_of(ns) for ns in namespaces()})
    found = []
    for name in names:
        state = read_state(name)
        cluster = None
        if state:
            cluster = Cluster(
                state["name"],
                state["nodes"],
                state["rate_bit_s"],
                state["persistent"],
                Faults.from_state(state.get("faults")),
                bool(state.get("slurm")),
            )
        found.append(
            Status(
                name,
                tuple(ns for ns in namespaces() if cluster_of(ns) == name),
                cluster,
                state.get("owner_pid") if state else None,
            )
        )
    return found


def cluster_named(name: str) -> Cluster | None:
    """The cluster of that name, from its state (None when none runs)."""
    return next((s.cluster for s in status() if s.name == name), None)


def refuse_leftovers() -> None:
    left = [s.name for s in status() if s.leftover]
    if left:
        raise UsageError(
            f"emulated cluster(s) {', '.join(left)} left by a crashed run "
            f"(namespaces {PREFIX}{left[0]}-*); remove them with `fabric-bench emulate down --all`"
        )


def preflight(cluster: Cluster) -> list[str]:
    """What an emulated run needs before its cluster comes up (launch.site.preflight asks)."""
    require_root()
    refuse_leftovers()
    return [f"root, ip, tc present; no leftover {PREFIX}* namespaces"]


def mpirun_args(cluster: Cluster, ranks_per_node: int) -> list[str]:
    hosts = ",".join(f"{cluster.node(i)}:{ranks_per_node}" for i in range(cluster.nodes))
    return [
        "--host",
        hosts,
        "--mca",
        "plm_rsh_agent",
        str(AGENT),
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "--mca",
        "oob_tcp_if_include",
        IFNAME,
        "--mca",
        "btl_tcp_if_include",
        IFNAME,
    ]


def in_node(cluster: Cluster, i: int, argv: list[str]) -> list[str]:
    """argv run inside node i's namespace with the node's name as hostname (no shell parses argv)."""
    node = cluster.node(i)
    return ["ip", "netns", "exec", node, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', node, *argv]


@contextlib.contextmanager
def running(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster is up for the duration; a cluster made here is removed afterwards,
    also on an exception, Ctrl-C or SIGTERM (turned into KeyboardInterrupt meanwhile)."""
    require_root()
    refuse_leftovers()
    if cluster.persistent and set(cluster.namespaces) <= set(namespaces()):
        yield cluster
        return
    previous = signal.getsignal(signal.SIGTERM)
    # only the main thread may set handlers; under launch.ranks.interrupt's stop requests none is needed
    main_thread = threading.current_thread() is threading.main_thread() and previous == signal.SIG_DFL

    def interrupt(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    if main_thread:
        signal.signal(signal.SIGTERM, interrupt)
    try:
        up(cluster, owner_pid=os.getpid())
        yield cluster
    finally:
        down(cluster.name)
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(f"cluster name {name!r}: use 1-16 lowercase letters and digits")
    return name
