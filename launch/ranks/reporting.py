"""What makes the libraries name their transports in a run's output: Open MPI's component
verbosity, UCX's and libfabric's log levels, NCCL's INIT,NET lines on NCCL runs. Every rank's
environment carries it (launch.ranks.launchers); launch.results.transport reads what they printed.
"""

from __future__ import annotations

REPORTING_ENV = {
    "OMPI_MCA_pml_base_verbose": "10",
    "OMPI_MCA_btl_base_verbose": "1",
    "OMPI_MCA_mtl_base_verbose": "10",
    "OMPI_MCA_mtl_ofi_verbose": "1",
    "UCX_LOG_LEVEL": "info",
    "FI_LOG_LEVEL": "warn",
}
NCCL_REPORTING_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
# Not HOROVOD_LOG_LEVEL=info: it cost torch+Horovod ~4 % of its throughput (benchmarks/
# harness_fidelity.py, 224 px: ours/reference 0.963 with it, 1.006 without), and the
# rank records already name Horovod's controller and operations (engine_info).


def reporting_env(spec) -> dict[str, str]:
    """Environment that makes MPI, UCX, libfabric (and NCCL where the run uses it)
    name their transports."""
    env = dict(REPORTING_ENV)
    if spec.uses_nccl:
        env |= NCCL_REPORTING_ENV
    return env
