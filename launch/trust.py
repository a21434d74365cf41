"""The trust boundary: what data from elsewhere may carry into a run, checked in one place.

Data enters the bundle at a few doors: a site file, an experiment file, a result, an
archive. Whatever a door admits is checked here by type and value before anything uses
it, and behind the doors nothing is re-checked:

- text that can reach a shell line or a job script (Slurm partition, account, time,
  hostfile, image, model, environment values) holds no control character: a newline
  in `partition` ended its #SBATCH line and ran the rest as shell code;
- an environment variable's name is an identifier ([A-Za-z_][A-Za-z0-9_]*);
- a run replayed from another site's archive may carry only the environment families
  the bundle itself sets (FOREIGN_ENV_PREFIXES, FOREIGN_ENV_NAMES): an environment
  alone executes code (LD_PRELOAD, PYTHONWARNINGS, BASH_ENV, BROWSER, PYTHONPATH, ...).
  Anything else is refused with its name, unless this site accepts it by name;
- archives are read within limits (ArchiveLimits) before memory grows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from launch.errors import UsageError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# What the bundle's presets, launchers and engines set, and what a site tunes them with.
FOREIGN_ENV_PREFIXES = ("NCCL_", "UCX_", "FI_", "OMPI_MCA_", "PMIX_MCA_", "PSM2_", "HFI_", "HOROVOD_", "TF_",
                        "GLOO_", "RDMAV_", "MLX5_", "IBV_", "CXI_", "OMP_")
FOREIGN_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "NVIDIA_VISIBLE_DEVICES",
                     "NVIDIA_DRIVER_CAPABILITIES", "KMP_AFFINITY", "KMP_BLOCKTIME", "MKL_NUM_THREADS",
                     "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_DISTRIBUTED_DEBUG")
# Within the families above, names that load or run code of their choosing
FOREIGN_ENV_REFUSED = ("NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_ENV_PLUGIN",
                       "FI_PROVIDER_PATH", "UCX_MODULE_DIR", "OMPI_MCA_mca_base_component_path",
                       "OMPI_MCA_plm_rsh_agent", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_launch_agent",
                       "OMPI_MCA_prte_launch_agent", "PMIX_MCA_mca_base_component_path", "OMP_TOOL_LIBRARIES",
                       "TF_CONFIG")


def check_text(field: str, value: object, where: str = "") -> None:
    """A string that may reach a shell line or a job script: printable, one line."""
    found = CONTROL.search(value) if isinstance(value, str) else None
    if found:
        raise UsageError(f"{where}{field} holds a control character ({found.group()!r}): refused", fields=(field,))


def check_env(env: Mapping[str, str], where: str = "") -> None:
    """Names are identifiers, values are one line of text."""
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise UsageError(f"{where}environment variable name {name!r} is not an identifier "
                             f"([A-Za-z_][A-Za-z0-9_]*)", fields=("extra_env",))
        if not isinstance(value, str):
            raise UsageError(f"{where}environment variable {name} must be a string, got {type(value).__name__}",
                             fields=("extra_env",))
        check_text(f"environment variable {name}", value, where)


def foreign_env_allowed(name: str) -> bool:
    if name in FOREIGN_ENV_REFUSED:
        return False
    return name in FOREIGN_ENV_NAMES or name.startswith(FOREIGN_ENV_PREFIXES)


def check_foreign_env(env: Mapping[str, str], accepted: Iterable[str] = (), where: str = "") -> None:
    """Another site's variables: the allow-list, plus what this site accepts by name."""
    check_env(env, where)
    accepted = set(accepted)
    refused = sorted(name for name in env if not foreign_env_allowed(name) and name not in accepted)
    if refused:
        raise UsageError(f"{where}environment variable {refused[0]} is not one a run may carry from another site"
                         f"{f' (and {len(refused) - 1} more)' if len(refused) > 1 else ''}; it can run code "
                         f"here: replay with --accept-env {refused[0]} only if you trust it", fields=("extra_env",))


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on reading an archive, far above any real one (a sweep archive is a few MB)."""
    members: int = 20_000
    member_bytes: int = 128 * 2**20
    total_bytes: int = 512 * 2**20

    def describe(self) -> str:
        return (f"at most {self.members} members, {self.member_bytes // 2**20} MiB each, "
                f"{self.total_bytes // 2**20} MiB unpacked in all")
