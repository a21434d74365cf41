"""Where a run's steady state begins: the warm-up found in its own step series, not assumed.

MSER (the marginal standard error rule, White 1997; MSER-5 in Franklin & White's form) from
simulation output analysis: group the series into batches of BATCH steps, and cut the first d
batches where d minimises the squared standard error of the mean of the batches left,

    MSER(d) = sum over the batches i > d of (Y_i - mean(Y_{d+1..k}))^2 / (k - d)^2,

searched over the first half (d <= k/2). A warm-up that is still slower (or faster) than the
rest adds to the spread the mean would carry, so cutting it lowers MSER(d); cutting steady
steps only shortens the series, which raises it. A cut at the end of the search says the run
never settled in its first half (`settled` false): the series is too short for its drift.

A training run has few steps (tens), so the batch is shortened where 5 would leave fewer than
MIN_BATCHES batches: BATCH steps from 10 x BATCH steps on, else one batch per ten steps, at
least one step. Plain Python: the ranks and the launch side both import it (bench/ imports
nothing of launch/).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

BATCH = 5  # MSER-5
MIN_BATCHES = 10  # a shorter series is batched finer (batch_for)
MIN_STEPS = 4  # fewer: nothing is cut


@dataclass(frozen=True)
class SteadyState:
    """How many steps of a series were warm-up (`warmup_steps_cut`), by which rule, of how many."""

    warmup_steps_cut: int
    steps: int
    batch: int
    settled: bool  # the cut fell inside the searched half, not at its end
    rule: str = "MSER"

    @property
    def steps_kept(self) -> int:
        return self.steps - self.warmup_steps_cut

    def as_dict(self) -> dict:
        return {**asdict(self), "rule": f"{self.rule}-{self.batch}", "steps_kept": self.steps_kept}


def batch_for(steps: int) -> int:
    """BATCH where the series holds MIN_BATCHES of them, else shorter (one per ten steps, >= 1)."""
    return BATCH if steps >= BATCH * MIN_BATCHES else max(1, steps // MIN_BATCHES)


def mser(values: list[float]) -> list[float]:
    """MSER(d) of a series of batch means, for d = 0 .. len // 2."""
    out = []
    for d in range(len(values) // 2 + 1):
        rest = values[d:]
        mean = statistics.fmean(rest)
        out.append(sum((y - mean) ** 2 for y in rest) / len(rest) ** 2)
    return out


def steady_state(series: list[float], batch: int | None = None) -> SteadyState:
    """The steady state of `series` (a run's per-step figures, in the order they were taken): the
    steps MSER cuts from its start. The step figure may be a rate or a time: the rule reads either."""
    n = len(series)
    size = batch or batch_for(n)
    if n < MIN_STEPS:
        return SteadyState(0, n, size, True)
    batches = n // size
    means = [statistics.fmean(series[i * size : (i + 1) * size]) for i in range(batches)]
    if batches < 2:
        return SteadyState(0, n, size, True)
    scores = mser(means)
    best = min(range(len(scores)), key=lambda d: (scores[d], d))
    return SteadyState(best * size, n, size, best < len(scores) - 1 or best == 0)


def steady_part(series: list[float], batch: int | None = None) -> list[float]:
    """The series without its warm-up (steady_state)."""
    return series[steady_state(series, batch).warmup_steps_cut :]
