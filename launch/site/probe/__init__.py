"""Host probe: what this machine offers for each fabric, as typed facts and verdicts.

Three layers, each testable on its own:
- `parsers`: pure functions, tool text in, facts out (`parse_ibv_devinfo`, ...), into the
  typed facts of `facts`;
- `collect`: `collect(run, root)` runs the tools in COMMANDS through `run` and reads
  /sys, /proc and /dev under `root`; a missing tool is the status "absent", never an
  exception;
- `verdicts`: `verdicts(facts)`, per fabric, usable or not and why; `probe_report`.

The names below are the probe's public surface (`from launch.site.probe import collect`):
callers import from here, not from the layers.
"""

from launch.site.probe.collect import (
    COMMANDS,
    DETECTED_PROVIDERS,
    PSM2_DIRS,
    ToolOutput,
    collect,
    merge_gids,
    merge_ports,
    read_nics,
    read_sysfs_rdma,
    read_topology,
    run_tool,
)
from launch.site.probe.facts import (
    FiEndpoint,
    Gpu,
    GpuTopology,
    HostFacts,
    Mpi,
    Nic,
    RdmaPort,
    TOPO_DISTANCE,
    TopoGpu,
    UcxTransport,
    Verdict,
)
from launch.site.probe.parsers import (
    NVIDIA_SMI_FIELDS,
    parse_cpu_list,
    parse_cpuinfo,
    parse_fi_info,
    parse_fi_info_list,
    parse_ib_rate,
    parse_ib_state,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_mpichversion,
    parse_nvidia_smi,
    parse_nvidia_smi_topo,
    parse_ompi_info,
    parse_srun_mpi_list,
    parse_ucx_info,
)
from launch.site.probe.verdicts import (
    DETECTORS,
    active_ports,
    fabric_ports,
    probe_report,
    verdict_interface,
    verdict_libfabric_provider,
    verdict_rdma_port,
    verdicts,
)

__all__ = [
    "COMMANDS",
    "DETECTED_PROVIDERS",
    "DETECTORS",
    "FiEndpoint",
    "Gpu",
    "GpuTopology",
    "HostFacts",
    "Mpi",
    "NVIDIA_SMI_FIELDS",
    "Nic",
    "PSM2_DIRS",
    "RdmaPort",
    "TOPO_DISTANCE",
    "ToolOutput",
    "TopoGpu",
    "UcxTransport",
    "Verdict",
    "active_ports",
    "collect",
    "fabric_ports",
    "merge_gids",
    "merge_ports",
    "parse_cpu_list",
    "parse_cpuinfo",
    "parse_fi_info",
    "parse_fi_info_list",
    "parse_ib_rate",
    "parse_ib_state",
    "parse_ibstat",
    "parse_ibv_devinfo",
    "parse_mpichversion",
    "parse_nvidia_smi",
    "parse_nvidia_smi_topo",
    "parse_ompi_info",
    "parse_srun_mpi_list",
    "parse_ucx_info",
    "probe_report",
    "read_nics",
    "read_sysfs_rdma",
    "read_topology",
    "run_tool",
    "verdict_interface",
    "verdict_libfabric_provider",
    "verdict_rdma_port",
    "verdicts",
]
