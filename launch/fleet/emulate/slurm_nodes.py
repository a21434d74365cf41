"""Slurm on an emulated cluster: a slurmd in every node's namespace, slurmctld on the bridge.

`fabric-bench emulate up --slurm` makes the cluster (launch.fleet.emulate.cluster), then:
- a veth from this host into the switch's bridge (`fbemu-slurm`, 10.213.0.254), so
  slurmctld and the Slurm clients (sbatch, srun, salloc) run on the host and reach
  every node; each node routes to the host through it (srun's own listening ports);
- slurm.conf in the state directory (/run/fabric-bench/emulate/NAME.slurm/): nodes
  n0..n{N-1}, each NodeAddr its namespace's address on the shaped link, so whatever
  Slurm starts on a node talks to the others over that node's link; auth/none,
  cred/none, proctrack/linuxproc, task/none, MpiDefault=pmix (ENVIRONMENT.md, Slurm);
- slurmd -N nI inside node I's namespace, with nI as its hostname (its own UTS
  namespace, inherited by slurmstepd and the ranks; entered with nsenter, keeping the
  host's /sys and its cgroup mount), and slurmctld on the host, all in
  the foreground as sessions of their own; their pids go into the cluster's state.

`stop` ends them by those pids (SIGTERM, then SIGKILL) before the namespaces go.
Only one Slurm cluster runs at a time (the host end of the bridge has one address).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Sequence

from containers.host import free_ports
from launch.fleet.emulate.cluster import (
    IFNAME,
    STATE_DIR,
    SUBNET,
    Cluster,
    process_running,
    read_state,
    run_tool,
    state_path,
    stop_processes,
)
from launch.errors import UsageError

HOST_IF = "fbemu-slurm"  # this host's end of the veth into the bridge
HOST_ADDRESS = f"{SUBNET}.254"
DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "salloc", "sinfo", "scontrol", "scancel", "squeue")
START_TIMEOUT_S = 40
STOP_TIMEOUT_S = 15


def node_name(i: int) -> str:
    return f"n{i}"


def directory(name: str) -> Path:
    return STATE_DIR / f"{name}.slurm"


def spool(name: str) -> Path:
    """slurmd's spool and TmpFS, under /tmp: srun --mpi=pmix hands the ranks directories in
    them (PMIX_SERVER_TMPDIR, and TmpFS as PMIx's tmpdir, where Open MPI makes its session
    directory), and Apptainer binds /tmp into the image but not /run: under /run, Open MPI in
    the image fails in MPI_Init (ORTE_ERROR_LOG ... session_dir.c)."""
    return Path("/tmp") / f"fabric-bench-emu-{name}-spool"


def conf_path(name: str) -> Path:
    return directory(name) / "slurm.conf"


def client_env(name: str) -> dict[str, str]:
    """The environment Slurm's clients need to reach this cluster (a DNS SRV lookup fails without it)."""
    return {**os.environ, "SLURM_CONF": str(conf_path(name))}


def available() -> bool:
    return all(shutil.which(tool) for tool in DAEMONS + CLIENTS)


def require() -> None:
    missing = [tool for tool in DAEMONS + CLIENTS if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"--slurm needs Slurm ({', '.join(missing)} not found); apt-get install slurm-wlm")
    if HOST_IF in run_tool("ip", "-o", "link", "show", check=False).stdout:
        raise UsageError(
            f"a Slurm emulated cluster runs already (interface {HOST_IF}); "
            "stop it with `fabric-bench emulate down --all`"
        )


def slurm_conf(
    *,
    name: str,
    controller: str,
    ctld_port: int,
    slurmd_port: int,
    where: Path,
    spool: str,
    tmp: str,
    nodes: Sequence[tuple[str, str | None]],
    cpus: int,
    partition: str,
    slurmd_files: str = "slurmd",
    timeouts: Sequence[str] = (),
) -> str:
    """A slurm.conf for a cluster of this machine: no munge (auth/none, cred/none), root daemons,
    state, pid files and logs under `where`. The one writer of such a file: the emulated cluster
    (conf_text) and the tests' single-host cluster (tests/slurm_cluster.py) both call it.

    `nodes`: (NodeName, NodeAddr or None) pairs, all in one default partition; `spool` and `tmp`:
    the slurmd's spool and TmpFS (Slurm expands %n to the node's name); `slurmd_files`: the stem of
    the slurmd's pid and log files ("%n.slurmd": one per node); `timeouts`: lines added after
    ReturnToService."""
    node_lines = [
        f"NodeName={node}" + (f" NodeAddr={address}" if address else "") + f" CPUs={cpus} State=UNKNOWN"
        for node, address in nodes
    ]
    return (
        "\n".join(
            [
                f"ClusterName={name}"[:40],
                f"SlurmctldHost={controller}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={ctld_port}",
                f"SlurmdPort={slurmd_port}",
                "AuthType=auth/none",
                "CredType=cred/none",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "MpiDefault=pmix",
                "EnforcePartLimits=ALL",
                "KillWait=2",
                "OverTimeLimit=0",
                "InactiveLimit=0",
                "MinJobAge=300",
                "ReturnToService=2",
                *timeouts,
                f"StateSaveLocation={where}/state",
                f"SlurmdSpoolDir={spool}",
                f"SlurmctldPidFile={where}/slurmctld.pid",
                f"SlurmdPidFile={where}/{slurmd_files}.pid",
                f"SlurmctldLogFile={where}/slurmctld.log",
                f"SlurmdLogFile={where}/{slurmd_files}.log",
                f"TmpFS={tmp}",
                *node_lines,
                f"PartitionName={partition} Nodes={','.join(node for node, _ in nodes)} Default=YES MaxTime=60 State=UP",
            ]
        )
        + "\n"
    )


def cpus_per_node(nodes: int) -> int:
    """Each emulated node's share of this host's cores (at least one). A node that offered all of
    them gave each of its ranks every core (SLURM_CPUS_ON_NODE, OMP_NUM_THREADS): two 1-rank nodes
    on 2 cores ran 4 OpenMP threads, and a tiny training run's compute phase swung from 460 to 4
    img/s. The share is what the emulated launcher gives its ranks (launch.ranks.emulated)."""
    return max(1, (os.cpu_count() or 1) // max(1, nodes))


def conf_text(cluster: Cluster, where: Path, host: str, ctld_port: int, slurmd_port: int) -> str:
    """The emulated cluster's slurm.conf: slurmctld on this host's end of the bridge, each node's
    slurmd at its namespace's address."""
    return slurm_conf(
        name=f"fbemu{cluster.name}",
        controller=f"{host}({HOST_ADDRESS})",
        ctld_port=ctld_port,
        slurmd_port=slurmd_port,
        where=where,
        spool=f"{spool(cluster.name)}/%n",
        tmp=f"{spool(cluster.name)}/tmp-%n",
        nodes=[(node_name(i), cluster.address(i)) for i in range(cluster.nodes)],
        cpus=cpus_per_node(cluster.nodes),
        partition="emu",
        slurmd_files="%n.slurmd",
        timeouts=("SlurmdTimeout=15", "MessageTimeout=10"),  # a node failure (test_emulated_slurm) shows in ~20 s
    )


def _record_pids(name: str, pids: dict[str, int]) -> None:
    state = read_state(name) or {}
    state["daemons"] = pids  # cluster.down stops them too (a `down --all` that knows nothing of Slurm)
    state["host_interface"] = HOST_IF
    state_path(name).write_text(json.dumps(state) + "\n", encoding="utf-8")


def daemon_pids(name: str) -> dict[str, int]:
    state = read_state(name) or {}
    pids = state.get("daemons") or {}
    return {k: v for k, v in pids.items() if isinstance(k, str) and isinstance(v, int) and v > 1}


def host_nameservers(resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    """The IPv4 name servers a node's resolver would ask through its default route to this host,
    which does not forward them: a lookup the hosts file cannot answer (c10d asks for the name of
    every peer address it connects) waited out the resolver's timeouts, 2 x 5 s, twice a training
    run. An unreachable route to each makes such a lookup fail at once, as on a node with no route out."""
    try:
        lines = resolv_conf.read_text(errors="replace").splitlines()
    except OSError:
        return []
    cluster = ipaddress.ip_network(f"{SUBNET}.0/24")
    servers = set()
    for line in lines:
        words = line.split()
        if len(words) < 2 or words[0] != "nameserver":
            continue
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(words[1])
            if address.version == 4 and not address.is_loopback and address not in cluster:
                servers.add(str(address))
    return sorted(servers)


def start(cluster: Cluster) -> dict[str, int]:
    """Bridge this host in, write slurm.conf, start slurmctld and one slurmd per node; wait until
    every node is idle. Undone (daemons stopped) on any failure; the caller removes the namespaces."""
    where = directory(cluster.name)
    shutil.rmtree(where, ignore_errors=True)
    shutil.rmtree(spool(cluster.name), ignore_errors=True)
    (where / "state").mkdir(parents=True)
    for i in range(cluster.nodes):
        (spool(cluster.name) / node_name(i)).mkdir(parents=True)
        (spool(cluster.name) / f"tmp-{node_name(i)}").mkdir()
    run_tool("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "host", "netns", cluster.switch)
    run_tool("ip", "-n", cluster.switch, "link", "set", "host", "master", "br0", "up")
    run_tool("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", HOST_IF)
    run_tool("ip", "link", "set", HOST_IF, "up")
    nameservers = host_nameservers()
    for i in range(cluster.nodes):
        run_tool("ip", "-n", cluster.node(i), "route", "add", "default", "via", HOST_ADDRESS, "dev", IFNAME)
        for server in nameservers:
            run_tool("ip", "-n", cluster.node(i), "route", "add", "unreachable", f"{server}/32")
    host = socket.gethostname().split(".")[0]
    conf = conf_path(cluster.name)
    conf.write_text(conf_text(cluster, where, host, *free_ports(2, host="")), encoding="utf-8")
    env = client_env(cluster.name)
    pids: dict[str, int] = {}
    try:
        pids["slurmctld"] = _spawn(["slurmctld", "-D", "-f", str(conf)], env, where / "slurmctld.stdout")
        for i in range(cluster.nodes):
            n = node_name(i)
            # nsenter, not `ip netns exec`: that mounts a sysfs of the namespace over /sys, hiding
            # /sys/fs/cgroup, and slurmd refuses to start without its cgroup mount
            argv = [
                "nsenter",
                f"--net=/run/netns/{cluster.node(i)}",
                "unshare",
                "--uts",
                "sh",
                "-c",
                'hostname "$0" && exec "$@"',
                n,
                "slurmd",
                "-D",
                "-N",
                n,
                "-f",
                str(conf),
            ]
            pids[n] = _spawn(argv, env, where / f"{n}.stdout")  # exec all the way: the pid is slurmd's
        _record_pids(cluster.name, pids)
        wait_idle(cluster, pids, env)
    except BaseException:
        stop(cluster.name, pids)
        raise
    return pids


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> int:
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return proc.pid


def node_states(env: dict[str, str]) -> dict[str, str]:
    try:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--Node", "--format=%N %T"], env=env, capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return {}
    return dict(line.split()[:2] for line in proc.stdout.splitlines() if len(line.split()) >= 2)


def wait_idle(cluster: Cluster, pids: dict[str, int], env: dict[str, str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        dead = [name for name, pid in pids.items() if not process_running(pid)]
        if dead:
            raise UsageError(f"emulated Slurm: {', '.join(dead)} exited at start: {last_line(cluster.name, dead[0])}")
        states = node_states(env)
        if len(states) == cluster.nodes and all(s == "idle" for s in states.values()):
            return
        time.sleep(0.3)
    raise UsageError(
        f"emulated Slurm: nodes not idle after {START_TIMEOUT_S} s ({states}): {last_line(cluster.name, 'slurmctld')}"
    )


def last_line(name: str, daemon: str) -> str:
    """The last error a daemon logged (the state directory goes with the cluster)."""
    where = directory(name)
    for path in (where / f"{daemon}.slurmd.log", where / f"{daemon}.log", where / f"{daemon}.stdout"):
        with contextlib.suppress(OSError):
            lines = [x for x in path.read_text(errors="replace").splitlines() if "error" in x.lower()]
            if lines:
                return lines[-1].strip()
    return "no error logged"


def stop(name: str, pids: dict[str, int] | None = None) -> list[int]:
    """Cancel the cluster's jobs, stop its daemons by pid (slurmds first), remove the host veth.
    Returns the pids that were running."""
    pids = daemon_pids(name) if pids is None else pids
    if not pids and not directory(name).exists():
        return []
    if pids.get("slurmctld") and process_running(pids["slurmctld"]) and conf_path(name).exists():
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["scancel", "--partition=emu"], env=client_env(name), capture_output=True, timeout=10)
    order = [pid for n, pid in pids.items() if n != "slurmctld"] + ([pids["slurmctld"]] if "slurmctld" in pids else [])
    was_running = stop_processes(order, STOP_TIMEOUT_S)
    run_tool("ip", "link", "del", HOST_IF, check=False)
    shutil.rmtree(spool(name), ignore_errors=True)
    if not os.environ.get("FABRIC_BENCH_KEEP_SLURM_LOGS"):
        shutil.rmtree(directory(name), ignore_errors=True)
    return was_running


def node_bytes(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Bytes sent and received on every node's shaped interface (the kernel's counters)."""
    counters = {}
    for i in range(cluster.nodes):
        out = run_tool(
            "ip",
            "netns",
            "exec",
            cluster.node(i),
            "cat",
            f"/sys/class/net/{IFNAME}/statistics/tx_bytes",
            f"/sys/class/net/{IFNAME}/statistics/rx_bytes",
            check=False,
        ).stdout.split()
        if len(out) == 2:
            counters[node_name(i)] = {"tx_bytes": int(out[0]), "rx_bytes": int(out[1])}
    return counters
