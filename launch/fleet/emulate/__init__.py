"""Emulated clusters: nodes as network namespaces on this machine, joined by tbf-shaped links.

links.py names and rates (`emu-eth-<rate>`), faults.py planted degradations (a slow node,
a bad link), cluster.py the lifecycle (namespaces, bridge, shaping, state, leftovers, the rsh
agent), slurm_nodes.py a slurmd per node with slurmctld on the bridge. This package is their
one interface: callers write `emulate.up`, `emulate.status`, ... A run's glue to a cluster (which
cluster, its mpirun arguments, its environment) reads a RunSpec, so it sits with the launchers
that build one: launch.ranks.emulated.
"""

from launch.fleet.emulate.cluster import (
    DEFAULT_CLUSTER,
    IFNAME,
    PREFIX,
    SUBNET,
    Cluster,
    Status,
    cluster_named,  # noqa: F401
    cluster_of,
    down,
    in_node,
    mpirun_args,
    namespaces,
    preflight,
    refuse_leftovers,
    require_root,
    running,
    status,
    tbf_args,
    up,
    validate_name,
)
from launch.fleet.emulate.links import fabric_rate_bit_s, link_rate_gbit_s, parse_rate, run_rate_bit_s  # noqa: F401
from launch.fleet.emulate.faults import Faults  # noqa: F401
from launch.fleet.emulate import faults, slurm_nodes  # noqa: F401
