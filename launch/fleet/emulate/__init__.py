"""Emulated clusters: nodes as network namespaces on this machine, joined by tbf-shaped links.

links.py names and rates (`emu-eth-<rate>`), faults.py planted degradations (a slow node,
a bad link), cluster.py the lifecycle (namespaces, bridge, shaping, state, leftovers, the rsh
agent), slurm_nodes.py a slurmd per node with slurmctld on the bridge, launcher.py a run's
glue. This package is their one interface: callers write `emulate.up`, `emulate.plan_for`, ...
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
    refuse_leftovers,
    require_root,
    running,
    status,
    tbf_args,
    up,
    validate_name,
)
from launch.fleet.emulate.launcher import cluster_for, fabric_env, plan_for, preflight, result_fields, session  # noqa: F401
from launch.fleet.emulate.links import fabric_rate_bit_s, link_rate_gbit_s, parse_rate, run_rate_bit_s  # noqa: F401
from launch.fleet.emulate.faults import Faults  # noqa: F401
from launch.fleet.emulate import faults, slurm_nodes  # noqa: F401
