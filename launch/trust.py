"""The trust boundary: what data from elsewhere may carry into a run, checked in one place.

Data enters the bundle at a few doors: a site file, an experiment file, a result, an
archive. Whatever a door admits is checked here by type and value before anything uses
it, and behind the doors nothing is re-checked:

- text that can reach a shell line or a job script (Slurm partition, account, time,
  hostfile, image, model, environment values) holds no control character: a newline
  in `partition` ended its #SBATCH line and ran the rest as shell code;
- an environment variable's name is an identifier ([A-Za-z_][A-Za-z0-9_]*);
- a run replayed from another site's archive, or swept from an experiment file (files that
  travel between sites alike), may carry only variables named exactly in launch.foreign_env's
  allow-list, each value of its shape: an environment alone executes code (LD_PRELOAD,
  OMPI_MCA_orte_fork_agent, NCCL_NET_PLUGIN, ...). Anything else is refused with its name and
  reason, unless this site accepts it by name; a name of a class that runs, loads, reads or
  writes what it names never (the local site file's own environment is the site's
  choice: only its shape, check_env);
- archives are read within limits (ArchiveLimits) before memory grows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from launch import foreign_env
from launch.errors import UsageError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_text(field: str, value: object, where: str = "") -> None:
    """A string that may reach a shell line or a job script: printable, one line."""
    found = CONTROL.search(value) if isinstance(value, str) else None
    if found:
        raise UsageError(f"{where}{field} holds a control character ({found.group()!r}): refused", fields=(field,))


def check_env(env: Mapping[str, str], where: str = "") -> None:
    """Names are identifiers, values are one line of text."""
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise UsageError(
                f"{where}environment variable name {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)",
                fields=("extra_env",),
            )
        if not isinstance(value, str):
            raise UsageError(
                f"{where}environment variable {name} must be a string, got {type(value).__name__}",
                fields=("extra_env",),
            )
        check_text(f"environment variable {name}", value, where)


def check_foreign_env(
    env: Mapping[str, str], accepted: Iterable[str] = (), where: str = "", listed_by: str | None = "replay --dry-run"
) -> None:
    """Variables from a file that travels between sites (an archive's runs, an experiment file's
    [run.env]): exact names with values of their shape (launch.foreign_env), plus what this site
    accepts by name, never a name of a class that runs, loads, reads or writes what it names. The
    first that does not pass is one line; the others are counted, and named unless `listed_by`
    (a command) lists them."""
    check_env(env, where)
    failing = [verdict for verdict in foreign_env.judge_all(env, accepted) if not verdict.passes]
    if failing:
        first, rest = failing[0], failing[1:]
        others = f"{listed_by} lists them" if listed_by else ", ".join(verdict.name for verdict in rest)
        more = f" (and {len(rest)} more: {others})" if rest else ""
        raise UsageError(
            f"{where}environment variable {first.name} is not one a run may carry from another site: "
            f"{first.explained()}{more}",
            fields=("extra_env",),
        )


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on reading an archive, far above any real one (a sweep archive is a few MB)."""

    members: int = 20_000
    member_bytes: int = 128 * 2**20
    total_bytes: int = 512 * 2**20

    def describe(self) -> str:
        return (
            f"at most {self.members} members, {self.member_bytes // 2**20} MiB each, "
            f"{self.total_bytes // 2**20} MiB unpacked in all"
        )
