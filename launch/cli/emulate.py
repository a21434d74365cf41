"""`fabric-bench emulate up|list|down|status`: an emulated cluster that outlives single runs."""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from launch.fleet import emulate
from launch.errors import UsageError

emulate_app = typer.Typer(
    help="Emulated clusters: network namespaces on a bridge with shaped links (root).", no_args_is_help=True
)


def rate_text(rate_bit_s: int | None) -> str:
    if rate_bit_s is None:
        return "unshaped"
    return f"{rate_bit_s / 1e9:g} Gbit/s" if rate_bit_s >= 1e9 else f"{rate_bit_s / 1e6:g} Mbit/s"


@emulate_app.command("up")
def up(
    nodes: int = typer.Option(2, help="nodes (network namespaces), >= 2"),
    link_rate: Optional[str] = typer.Option(None, help="every node's link rate, e.g. 1gbit (default: unshaped)"),
    link: list[str] = typer.Option(
        [], help="RATE (every link), nI=RATE (node I's link) or nI-nJ=RATE (the path between I and J); repeatable"
    ),
    slow: list[str] = typer.Option(
        [], help="nI[=RATE]: node I sends slower (its egress only; default a quarter of its link); repeatable"
    ),
    slurm: bool = typer.Option(False, "--slurm", help="a slurmd per node, slurmctld on the bridge"),
    name: str = typer.Option(emulate.DEFAULT_CLUSTER, help="cluster name (namespaces fbemu-NAME-*)"),
):
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
        rate = emulate.parse_rate(link_rate, "--link-rate")
    faults.egress_rate(0, rate)  # a slow node without a rate needs one
    emulate.require_root()
    emulate.refuse_leftovers()
    if slurm:
        emulate.slurm_nodes.require()
    cluster = emulate.up(
        emulate.Cluster(emulate.validate_name(name), nodes, rate, persistent=True, faults=faults, slurm=slurm)
    )
    if slurm:
        try:
            emulate.slurm_nodes.start(cluster)
        except BaseException:
            emulate.slurm_nodes.stop(cluster.name)
            emulate.down(cluster.name)
            raise
    print(
        f"cluster {cluster.name}: {nodes} nodes ({', '.join(cluster.namespaces[1:])}), "
        f"links {rate_text(rate)}, interface {emulate.IFNAME} on {emulate.SUBNET}.0/24"
        + (f"; planted: {', '.join(faults.describe())}" if faults else "")
    )
    if slurm:
        print(
            f"Slurm: nodes n0..n{nodes - 1}, slurmctld on {emulate.slurm_nodes.HOST_ADDRESS}; "
            f"export SLURM_CONF={emulate.slurm_nodes.conf_path(cluster.name)}"
        )


@emulate_app.command("list")
def list_nodes(json_output: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """The emulated clusters that are up and their nodes: namespace, address, link rate, planted
    faults, and for a --slurm cluster its node names and the SLURM_CONF to export.

    Example: fabric-bench emulate list
    """
    up_now = [s for s in emulate.status() if s.cluster is not None and not s.leftover]
    listed: list[dict[str, Any]] = []
    for s in up_now:
        cluster = s.cluster
        assert cluster is not None
        nodes: list[dict[str, Any]] = []
        for i in range(cluster.nodes):
            link = cluster.faults.node_rate(i, cluster.rate_bit_s)
            slow = dict(cluster.faults.slow_nodes)
            egress = cluster.faults.egress_rate(i, link) if i in slow and (slow[i] or link) else link
            nodes.append(
                {
                    "node": emulate.slurm_nodes.node_name(i),
                    "namespace": cluster.node(i),
                    "address": cluster.address(i),
                    "link_bit_s": link,
                    "egress_bit_s": egress if egress != link else None,
                    "slow_paths": [
                        {"to": emulate.slurm_nodes.node_name(peer), "bit_s": rate}
                        for peer, rate in cluster.faults.degraded_peers(i)
                    ],
                }
            )
        listed.append(
            {
                "name": cluster.name,
                "nodes": nodes,
                "rate_bit_s": cluster.rate_bit_s,
                "slurm_conf": str(emulate.slurm_nodes.conf_path(cluster.name)) if cluster.slurm else None,
            }
        )
    if json_output:
        print(json.dumps(listed, indent=2))
        return
    if not listed:
        print("no emulated cluster is up (fabric-bench emulate up --nodes 2 makes one)")
    for cluster_data in listed:
        slurm_conf = cluster_data["slurm_conf"]
        print(
            f"{cluster_data['name']}: {len(cluster_data['nodes'])} nodes, links {rate_text(cluster_data['rate_bit_s'])}"
            + (f"; Slurm: export SLURM_CONF={slurm_conf}" if slurm_conf else "; no Slurm (runs: --launcher emulated)")
        )
        for node in cluster_data["nodes"]:
            notes = [f"sends at {rate_text(node['egress_bit_s'])}"] if node["egress_bit_s"] else []
            notes += [f"path to {p['to']} {rate_text(p['bit_s'])}" for p in node["slow_paths"]]
            print(
                f"  {node['node']:<4} {node['namespace']:<20} {node['address']:<12} link {rate_text(node['link_bit_s'])}"
                + (f" ({'; '.join(notes)})" if notes else "")
            )


@emulate_app.command("down")
def down(
    name: Optional[str] = typer.Argument(None, help="cluster to remove (default: main)"),
    all_clusters: bool = typer.Option(False, "--all", help="remove every fbemu-* namespace, leftovers included"),
):
    """Remove a cluster: its namespaces (and with them its bridge, veths and qdiscs).

    Example: fabric-bench emulate down --all
    """
    emulate.require_root()
    if all_clusters and name:
        raise UsageError("give a cluster name or --all, not both")
    names = (
        sorted({emulate.cluster_of(ns) for ns in emulate.namespaces()})
        if all_clusters
        else [emulate.validate_name(name or emulate.DEFAULT_CLUSTER)]
    )
    stopped = [pid for n in names for pid in emulate.slurm_nodes.stop(n)]  # daemons first, by pid
    removed = [ns for n in names for ns in emulate.down(n)]
    print(
        f"removed {len(removed)} namespace(s)"
        + (f": {', '.join(removed)}" if removed else "")
        + (f"; stopped {len(stopped)} Slurm daemon(s)" if stopped else "")
    )


@emulate_app.command("status")
def status(json_output: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """List emulated clusters on this machine, and leftovers of crashed runs.

    Example: fabric-bench emulate status
    """
    found = emulate.status()
    if json_output:
        print(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "namespaces": list(s.namespaces),
                        "leftover": s.leftover,
                        "owner_pid": s.owner_pid,
                        "nodes": s.cluster.nodes if s.cluster else None,
                        "rate_bit_s": s.cluster.rate_bit_s if s.cluster else None,
                        "persistent": s.cluster.persistent if s.cluster else None,
                    }
                    for s in found
                ],
                indent=2,
            )
        )
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
