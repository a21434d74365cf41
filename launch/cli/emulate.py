"""`fabric-bench emulate up|down|status`: an emulated cluster that outlives single runs."""
from __future__ import annotations

import json
from typing import Optional

import typer

from launch import emulate
from launch.errors import UsageError

emulate_app = typer.Typer(help="Emulated clusters: network namespaces on a bridge with shaped links (root).",
                          no_args_is_help=True)


def rate_text(rate_bit_s: int | None) -> str:
    return "unshaped" if rate_bit_s is None else f"{rate_bit_s / 1e9:g} Gbit/s"


@emulate_app.command("up")
def up(nodes: int = typer.Option(2, help="nodes (network namespaces), >= 2"),
       link_rate: Optional[str] = typer.Option(None, help="every node's link rate, e.g. 1gbit (default: unshaped)"),
       link: list[str] = typer.Option([], help="RATE (every link), nI=RATE (node I's link) or nI-nJ=RATE "
                                                "(the path between I and J); repeatable"),
       slow: list[str] = typer.Option([], help="nI[=RATE]: node I sends slower (its egress only; default a "
                                                "quarter of its link); repeatable"),
       slurm: bool = typer.Option(False, "--slurm", help="a slurmd per node, slurmctld on the bridge"),
       name: str = typer.Option(emulate.DEFAULT_CLUSTER, help="cluster name (namespaces fbemu-NAME-*)")):
    """Bring up a cluster that `run --launcher emulated` with the same nodes and rate uses,
    or with --slurm one that Slurm's srun and sbatch reach (export the SLURM_CONF it prints).

    Example: fabric-bench emulate up --nodes 2 --link-rate 1gbit
    """
    if nodes < 2:
        raise UsageError(f"an emulated cluster needs --nodes >= 2, got {nodes}")
    rate, faults = emulate.faults.parse(link, slow, nodes)
    if link_rate:
        if rate is not None:
            raise UsageError("give the cluster's rate once: --link-rate RATE or --link RATE")
        rate = emulate.parse_rate(link_rate)
    faults.egress_rate(0, rate)  # a slow node without a rate needs one
    emulate.require_root()
    emulate.refuse_leftovers()
    if slurm:
        emulate.slurm_nodes.require()
    cluster = emulate.up(emulate.Cluster(emulate.validate_name(name), nodes, rate, persistent=True,
                                         faults=faults, slurm=slurm))
    if slurm:
        try:
            emulate.slurm_nodes.start(cluster)
        except BaseException:
            emulate.slurm_nodes.stop(cluster.name)
            emulate.down(cluster.name)
            raise
    print(f"cluster {cluster.name}: {nodes} nodes ({', '.join(cluster.namespaces[1:])}), "
          f"links {rate_text(rate)}, interface {emulate.IFNAME} on {emulate.SUBNET}.0/24"
          + (f"; planted: {', '.join(faults.describe())}" if faults else ""))
    if slurm:
        print(f"Slurm: nodes n0..n{nodes - 1}, slurmctld on {emulate.slurm_nodes.HOST_ADDRESS}; "
              f"export SLURM_CONF={emulate.slurm_nodes.conf_path(cluster.name)}")


@emulate_app.command("down")
def down(name: Optional[str] = typer.Argument(None, help="cluster to remove (default: main)"),
         all_clusters: bool = typer.Option(False, "--all", help="remove every fbemu-* namespace, leftovers included")):
    """Remove a cluster: its namespaces (and with them its bridge, veths and qdiscs).

    Example: fabric-bench emulate down --all
    """
    emulate.require_root()
    if all_clusters and name:
        raise UsageError("give a cluster name or --all, not both")
    names = sorted({emulate.cluster_of(ns) for ns in emulate.namespaces()}) if all_clusters else \
        [emulate.validate_name(name or emulate.DEFAULT_CLUSTER)]
    stopped = [pid for n in names for pid in emulate.slurm_nodes.stop(n)]  # daemons first, by pid
    removed = [ns for n in names for ns in emulate.down(n)]
    print(f"removed {len(removed)} namespace(s)" + (f": {', '.join(removed)}" if removed else "")
          + (f"; stopped {len(stopped)} Slurm daemon(s)" if stopped else ""))


@emulate_app.command("status")
def status(json_output: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """List emulated clusters on this machine, and leftovers of crashed runs.

    Example: fabric-bench emulate status
    """
    found = emulate.status()
    if json_output:
        print(json.dumps([{"name": s.name, "namespaces": list(s.namespaces), "leftover": s.leftover,
                           "owner_pid": s.owner_pid,
                           "nodes": s.cluster.nodes if s.cluster else None,
                           "rate_bit_s": s.cluster.rate_bit_s if s.cluster else None,
                           "persistent": s.cluster.persistent if s.cluster else None} for s in found], indent=2))
        return
    if not found:
        print("no emulated clusters")
    for s in found:
        if s.cluster is None:
            what = "unknown origin"
        else:
            owner = "emulate up" if s.cluster.persistent else f"run pid {s.owner_pid}"
            what = f"{s.cluster.nodes} nodes, links {rate_text(s.cluster.rate_bit_s)}, made by {owner}"
        flag = " LEFTOVER (fabric-bench emulate down --all)" if s.leftover else ""
        print(f"{s.name}: {what}; namespaces {' '.join(s.namespaces)}{flag}")


def register(app: typer.Typer) -> None:
    app.add_typer(emulate_app, name="emulate")
