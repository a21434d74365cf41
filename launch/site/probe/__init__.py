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

from launch.site.probe.collect import COMMANDS, DETECTED_PROVIDERS, Runner, ToolOutput, collect, run_tool
from launch.site.probe.collect import read_sysfs_rdma
from launch.site.probe.facts import (
    FiEndpoint,
    Gpu,
    GpuTopology,
    HostFacts,
    Mpi,
    Nic,
    RdmaPort,
    TopoGpu,
    UcxTransport,
    Verdict,
)
from launch.site.probe.parsers import (
    parse_fi_info,
    parse_fi_info_list,
    parse_ib_rate,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_nvidia_smi,
    parse_nvidia_smi_topo,
    parse_ompi_info,
    parse_ucx_info,
)
from launch.site.probe.verdicts import active_ports, probe_report, verdicts

__all__ = [
    "COMMANDS",
    "DETECTED_PROVIDERS",
    "FiEndpoint",
    "Gpu",
    "GpuTopology",
    "HostFacts",
    "Mpi",
    "Nic",
    "RdmaPort",
    "Runner",
    "TopoGpu",
    "ToolOutput",
    "UcxTransport",
    "Verdict",
    "active_ports",
    "collect",
    "parse_fi_info",
    "parse_fi_info_list",
    "parse_ib_rate",
    "parse_ibstat",
    "parse_ibv_devinfo",
    "parse_nvidia_smi",
    "parse_nvidia_smi_topo",
    "parse_ompi_info",
    "parse_ucx_info",
    "probe_report",
    "read_sysfs_rdma",
    "run_tool",
    "verdicts",
]
