"""A run on an emulated cluster: the launcher's glue between a RunSpec and the cluster
(launch.fleet.emulate.cluster) — which cluster, the mpirun arguments that reach its namespaces,
the emulated ethernet environment, and what the result records about the emulation."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
from typing import TYPE_CHECKING

from bench import horovod_settings
from launch.fleet.emulate.cluster import (
    BURST_S,
    IFNAME,
    Cluster,
    mpirun_args,
    running,
    status,
)
from containers.fabrics import is_emulated
from launch.fleet.emulate.links import link_rate_gbit_s, run_rate_bit_s
from launch.errors import UsageError

if TYPE_CHECKING:  # launch.ranks.launchers does not import this module: no circle
    from launch.ranks.launchers import Plan
    from launch.ranks.runspec import RunSpec


def cluster_for(spec: RunSpec) -> Cluster:
    """The cluster a run uses: the persistent one if it matches, else a fresh one of its own."""
    rate = run_rate_bit_s(spec)
    for found in status():
        c = found.cluster
        if c and c.persistent and c.nodes == spec.nodes and c.rate_bit_s == rate:
            return c
    return Cluster(f"r{secrets.token_hex(3)}", spec.nodes, rate)


def fabric_env(spec: RunSpec) -> dict[str, str]:
    """An emulated fabric's environment: the ethernet profile on every node's interface,
    the address rank 0 advertises for DDP (bench.rendezvous), and, because all nodes share
    this machine's cores, a CPU share per rank and Horovod waits that poll instead of
    holding a core (bench.horovod_settings)."""
    from containers.fabrics import ETHERNET

    run_rate_bit_s(spec)  # an emu- fabric needs the emulated launcher and a known rate
    env = ETHERNET.environment({"nic": IFNAME}, nccl=spec.uses_nccl)
    return {
        **env,
        "FABRIC_BENCH_MASTER_IFNAME": IFNAME,
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // spec.ranks)),
        horovod_settings.WAIT_ENV: "poll",
    }


def plan_for(spec: RunSpec, plan: Plan) -> Plan:
    """The launcher plan of an emulated run: its cluster and the mpirun arguments reaching the
    namespaces (the emulated ethernet environment is the run's preset: launch.site.fabric_preset)."""
    if spec.fabric and not is_emulated(spec.fabric):
        raise UsageError(
            f"the emulated launcher emulates ethernet links; use --fabric emu-eth-<rate> "
            f"or no --fabric, not {spec.fabric}",
            fields=("fabric", "launcher"),
        )
    cluster = cluster_for(spec)
    return dataclasses.replace(
        plan, emulated_cluster=cluster, mpirun_args=(*plan.mpirun_args, *mpirun_args(cluster, spec.ranks_per_node))
    )


def session(plan: Plan) -> contextlib.AbstractContextManager[Cluster | None]:
    """Context for running a plan: its emulated cluster up (a no-op for other launchers)."""
    cluster = plan.emulated_cluster
    return running(cluster) if cluster is not None else contextlib.nullcontext()


def result_fields(spec: RunSpec, plan: Plan) -> dict:
    cluster = plan.emulated_cluster
    if cluster is None:
        return {}
    return {
        "link_rate_gbit_s": link_rate_gbit_s(spec),
        "emulation": {
            "cluster": cluster.name,
            "nodes": cluster.nodes,
            "persistent": cluster.persistent,
            "interface": IFNAME,
            "shaping": "tbf" if cluster.rate_bit_s else None,
            "burst_s": BURST_S,
            "latency_emulated": False,
        },
    }
