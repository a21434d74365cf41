"""Headlines that know when they are wrong: the one-line figures `make bench`, `run` and
sweeps print, marked where a run was disturbed (its disturbance record, launch.disturbance)
and flagged where the hardware makes the figure impossible.

- A figure from a disturbed run carries the run's causes on the same line.
- A ratio built on a disturbed run is not printed as a number: the line names the
  disturbed run and says the ratio cannot be read.
- A same-cores efficiency above SAME_CORES_IMPOSSIBLE is flagged whatever the record says:
  N ranks sharing the cores of one rank cannot do much more than its work (docs/disturbance.md).
  A bus bandwidth above the link rate is flagged by launch.results.plausibility.

What a line takes from a result (names, run ids, causes) is plain terminal text (launch.shapes.terminal:
no escape sequence); a caller that prints it inside rich markup escapes it further (rich_text).
"""

from __future__ import annotations

from launch.kinds import kind_of
from launch.results.result import Result, disturbance_causes, disturbance_summary, disturbed, typed
from launch.shapes import terminal

# Same cores, N ranks vs 1: quiet rounds here read 0.93-1.03, loaded ones 0.85-1.18 (issue 37);
# splitting one rank's intra-op threads over processes can gain some, not a third.
SAME_CORES_IMPOSSIBLE = 1.3


def run_name(result: Result) -> str:
    """'torch horovod x2': framework, how its ranks communicated (its kind's: engine, backend) and
    world size."""
    fields = typed(result)
    if fields is None:
        return "run"
    spec_framework = result.spec.framework
    kind = kind_of(result)
    what = (kind.communicates(fields) if kind is not None else fields.engine) or fields.benchmark or "run"
    return terminal(f"{fields.framework or spec_framework or ''} {what} x{fields.world_size}".strip())


def disturbance_line(result: Result) -> str:
    """'disturbance: clean', or the verdict with every named cause."""
    causes = disturbance_causes(result)
    return terminal(f"disturbance: {disturbance_summary(result)}" + (f" ({'; '.join(causes)})" if causes else ""))


def unreadable(results: list[Result]) -> str | None:
    """Why a figure built on these runs cannot be read (None: none of them was disturbed)."""
    bad = [r for r in results if disturbed(r)]
    if not bad:
        return None
    return terminal(
        "; ".join(f"{run_name(r)} ({r.run_id}) was disturbed: {', '.join(disturbance_causes(r))}" for r in bad)
    )


def ratio_line(label: str, value: float, built_on: list[Result], fmt: str = ".2f") -> str:
    """'LABEL 1.18', or why it cannot be read when a run it is built on was disturbed."""
    why = unreadable(built_on)
    if why is not None:
        return f"{label} cannot be read: {why}"
    return f"{label} {format(value, fmt)}"


def impossible_same_cores(value: float | None, ranks: int) -> str | None:
    if value is None or value <= SAME_CORES_IMPOSSIBLE:
        return None
    return (
        f"same-cores efficiency {value:.2f} is impossible: {ranks} ranks on the cores of one cannot do "
        f"{value:.2f}x its work (above {SAME_CORES_IMPOSSIBLE:g}); a run behind it was disturbed in a way "
        f"the record did not catch, or the 1-rank run did not use its cores"
    )
