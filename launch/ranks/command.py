"""A fully resolved command: the argv to execute and the environment it adds."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # set on top of the caller's environment

    def render(self) -> str:
        """Copy-pasteable shell form, for --dry-run and logs only (never executed)."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        return " ".join(assignments + [shlex.quote(a) for a in self.argv])
