"""Alternating rounds and their paired ratios: how the benchmarks compare arms on a shared machine.

Every round runs every arm once, the order reversed every other round, so a slow drift of the
machine (another job starting, the page cache filling, a thermal limit) hits every arm alike;
a ratio between two arms is then read round by round, each round's two runs back to back, and
its 95 % CI is the paired Student-t interval on the per-round log ratios: what moves between
rounds widens it, what moves within a run does not enter twice. Used by benchmarks/train_engines.py
(`make bench`: engine ratios, same-cores efficiency) and benchmarks/harness_fidelity.py (ours vs
the reference loops).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bench.stats import summarize

Arm = TypeVar("Arm")


def alternating(arms: Sequence[Arm], rounds: int) -> Iterator[tuple[int, Arm]]:
    """(round, arm) in the order they run: every arm once a round, reversed every other round."""
    for round_ in range(rounds):
        for arm in arms if round_ % 2 == 0 else list(reversed(arms)):
            yield round_, arm


@dataclass(frozen=True)
class PairedRatio:
    """The geometric mean of per-round ratios a/b and its paired 95 % CI (None with one round)."""

    ratio: float
    low: float | None
    high: float | None
    per_round: tuple[float, ...]

    @property
    def rounds(self) -> int:
        return len(self.per_round)

    @property
    def half_width(self) -> float | None:
        """The CI's larger side, relative to the ratio (0.08: within ±8 %)."""
        if self.low is None or self.high is None:
            return None
        return max(self.high / self.ratio - 1, 1 - self.low / self.ratio)

    def text(self, fmt: str = ".2f") -> str:
        """'1.03, 95 % CI [0.97, 1.09] (paired, 5 rounds)', or '1.03 (one round: no CI)'."""
        if self.low is None or self.high is None:
            return f"{self.ratio:{fmt}} (one round: no CI)"
        return f"{self.ratio:{fmt}}, 95 % CI [{self.low:{fmt}}, {self.high:{fmt}}] (paired, {self.rounds} rounds)"

    def as_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "ci95": None if self.low is None else [self.low, self.high],
            "per_round": list(self.per_round),
        }


def paired_ratio(pairs: Sequence[tuple[float, float]]) -> PairedRatio | None:
    """a/b over rounds, from each round's (a, b); None without a round where both are positive."""
    ratios = tuple(a / b for a, b in pairs if a > 0 and b > 0 and math.isfinite(a / b))
    if not ratios:
        return None
    logs = summarize([math.log(r) for r in ratios])
    if len(ratios) < 2:
        return PairedRatio(ratios[0], None, None, ratios)
    return PairedRatio(math.exp(logs.mean), math.exp(logs.mean - logs.ci95), math.exp(logs.mean + logs.ci95), ratios)
