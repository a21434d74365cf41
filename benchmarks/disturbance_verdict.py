"""The verdict a planted disturbance flips: the battery's last part (benchmarks/disturbance.py).

Two fabrics that are one link under two names: emulated clusters (launch.fleet.emulate) of two
nodes whose links are shaped to the same rate, written two ways (emu-eth-10g, emu-eth-10000m).
By construction the right verdict is "no significant difference", the reference study's own
finding for Ethernet. The two alternate, repetition by repetition; every first run on the
second name has busy processes planted on its cores (benchmarks/planting.py), and the sweep's
rule (launch.runs.sweep.run_point) measures a disturbed run again, unplanted, at most
REMEASURE_DISTURBED times, each re-measurement naming the run it repeats.

Two verdicts come from the same aggregation and verdict code the report uses:

    without the record  what a tool that records nothing would have: both names' first runs,
                        nothing measured again, nothing left out
    with the record     every run, disturbed runs left out of the verdict (the default)

A flip: the first is a significant difference, the second is not.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.planting import cpu_hogs, heartbeats
from launch.ranks.runspec import RunSpec
from launch.analysis.aggregate import aggregate
from launch.results.result import Result, disturbance_causes, disturbed, field_of, read
from launch.analysis.verdict import verdicts
from launch.runs.run import execute_run, prepare
from launch.runs.sweep import REMEASURE_DISTURBED

REFERENCE, PLANTED = "emu-eth-10g", "emu-eth-10000m"  # one rate, two names
RIGHT = "no significant difference"


@dataclass
class Measured:
    """One run: its result as read back, and its ranks' pids (from their heartbeats) for the caller's check."""

    result: Result
    rank_pids: list[int]

    @property
    def disturbance(self) -> dict:
        record = field_of(self.result, "disturbance")
        return record.model_dump(mode="json") if record is not None else {}


def one_run(spec: RunSpec, results: Path, planted: bool, annotations: dict | None, pids: list[int]) -> Measured:
    prepared = prepare(spec, results)
    with cpu_hogs(pids) if planted else contextlib.nullcontext():
        execute_run(spec, prepared, timeout=600, echo=False, annotations=annotations)
    rank_pids = {b["pid"] for b in heartbeats(prepared.plan.record_dir) if isinstance(b.get("pid"), int)}
    return Measured(read(prepared.run_dir / "result.json"), sorted(rank_pids))


def measured(spec: RunSpec, results: Path, planted: bool, pids: list[int]) -> list[Measured]:
    """A point's runs under the sweep's rule: measured again while disturbed, each repeat unplanted."""
    runs = [one_run(spec, results, planted, None, pids)]
    for attempt in range(1, REMEASURE_DISTURBED + 1):
        last = runs[-1].result
        if not last.ok or not disturbed(last):
            break
        why = {"run_id": last.run_id, "attempt": attempt, "why": disturbance_causes(last)}
        runs.append(one_run(spec, results, False, {"remeasure_of": why}, pids))
    return runs


def verdict_row(results: list[Result], keep_disturbed: bool) -> dict:
    rows = verdicts(aggregate(results, keep_disturbed), "fabric", REFERENCE)["rows"]
    if len(rows) != 1:
        return {"verdict": f"no verdict ({len(rows)} rows)", "significant": False, "left_out": []}
    return rows[0]


def demonstrate(workload: dict, results: Path, repetitions: int, echo: Callable[[str], None] = print) -> dict:
    """Run the demonstration; its figures as plain data (the battery's JSON keeps them)."""
    pids: list[int] = []
    reference: list[Result] = []
    first_planted: list[Result] = []
    every: list[Measured] = []
    for repetition in range(repetitions):
        order = (REFERENCE, PLANTED) if repetition % 2 == 0 else (PLANTED, REFERENCE)
        for fabric in order:
            spec = RunSpec(launcher="emulated", nodes=2, ranks=2, fabric=fabric, **workload)
            runs = measured(spec, results, fabric == PLANTED, pids)
            (reference if fabric == REFERENCE else first_planted).append(runs[0].result)
            every += runs
            for run in runs:
                record = run.disturbance
                causes = ", ".join(c.get("signal", "?") for c in record.get("causes") or []) or "-"
                again = " (measured again)" if field_of(run.result, "remeasure_of") else ""
                echo(f"verdict run {repetition + 1} {fabric:<15} {record.get('verdict')!s:<10} {causes}{again}")
    without = verdict_row(reference + first_planted, keep_disturbed=True)
    with_record = verdict_row([run.result for run in every], keep_disturbed=False)
    return {
        "reference": REFERENCE,
        "planted": PLANTED,
        "repetitions": repetitions,
        "right": RIGHT,
        "without_record": summary_of(without),
        "with_record": summary_of(with_record),
        "flipped": bool(without.get("significant")) and not with_record.get("significant"),
        "came_out_right": with_record.get("verdict") == RIGHT,
        "runs": [
            {
                "run_id": run.result.run_id,
                "fabric": run.result.fabric,
                "verdict": run.disturbance.get("verdict"),
                "remeasure_of": field_of(run.result, "remeasure_of"),
                "rank_pids": run.rank_pids,
            }
            for run in every
        ],
        "planted_pids": pids,
    }


def summary_of(row: dict) -> dict:
    return {
        "verdict": row.get("verdict"),
        "significant": bool(row.get("significant")),
        "speed_ratio": row.get("speed_ratio"),
        "speed_ci95": row.get("speed_ci95"),
        "reference_runs": len(row.get("reference_runs") or []),
        "runs": len(row.get("runs") or []),
        "left_out": [entry.get("run_id") for entry in row.get("left_out") or []],
    }


def print_demonstration(demo: dict) -> None:
    print(
        f"\nverdict: {demo['planted']} against {demo['reference']} (one link under two names: the right "
        f"verdict is '{demo['right']}'); busy processes planted on every first {demo['planted']} run"
    )
    for label, key in (("without the record", "without_record"), ("with the record   ", "with_record")):
        row = demo[key]
        ratio = f"{row['speed_ratio']:.3f}" if isinstance(row["speed_ratio"], float) else "-"
        ci = "[{:.3f}, {:.3f}]".format(*row["speed_ci95"]) if row["speed_ci95"] else "-"
        left = f", {len(row['left_out'])} disturbed left out" if row["left_out"] else ""
        print(
            f"  {label}: {row['verdict']} (speed ratio {ratio}, 95 % CI {ci}; "
            f"{row['reference_runs']} vs {row['runs']} runs{left})"
        )
    outcome = "flipped by the disturbance" if demo["flipped"] else "not flipped by the disturbance"
    print(f"  the verdict was {outcome}; with the record it came out {'right' if demo['came_out_right'] else 'WRONG'}")
