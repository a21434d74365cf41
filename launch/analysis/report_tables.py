"""The report's tables as (header, rows) of text: every run, the runs' health, the points. Every cell
is terminal text (launch.shapes.terminal: a result's strings may be another site's); the HTML page
escapes them again for HTML."""

from __future__ import annotations

from collections.abc import Sequence

from launch.analysis import aggregate
from launch.figures import interval_text, value_text
from launch.analysis.baseline import words_beside
from launch.kinds import kind_of
from launch.results.result import Result, as_result, disturbance_causes, disturbance_summary, typed
from launch.shapes import terminal


def _cell(value, fmt: str = ".1f") -> str:
    return "-" if value is None else (format(value, fmt) if isinstance(value, float) else str(value))


def _shown(rows: list[list[str]]) -> list[list[str]]:
    return [[terminal(cell) for cell in row] for row in rows]


def beside(fields, name: str) -> dict:
    """A record every run holds beside the declared fields (launch.results.assemble), or {}."""
    value = getattr(fields, name, None)
    return value if isinstance(value, dict) else {}


def runs_table(results: Sequence[Result], points: list[aggregate.Point]) -> tuple[list[str], list[list[str]]]:
    """Every run (repetitions kept), efficiency against the aggregated baseline of its series; where
    the ranks shared one host's cores, also against the same cores (total at N / total at 1)."""
    header = [
        "run",
        "fabric",
        "engine/backend",
        "model",
        "ranks",
        "figure of merit",  # the kind's (launch.kinds): img/s, busbw at the largest size, time per iteration
        "95% CI",
        "scaling eff.",
        "comm share",
        "transport",
        "status",
        "vs this site's baseline",  # launch.analysis.baseline: the verdict beside the result
    ]
    rows = []
    for r in sorted(map(as_result, results), key=lambda x: (aggregate.series_name(x), x.world_size or 0, x.run_id)):
        fields, kind = typed(r), kind_of(r)
        value = kind.value(fields) if kind is not None and fields is not None else None
        unit = kind.metric.unit if kind is not None else ""
        point = aggregate.point_of(points, r)
        eff = point.run_efficiency(r) if point is not None else None
        same = point.same_cores_efficiency(r) if point is not None else None
        comm = aggregate.number(getattr(fields, "comm_fraction", None)) if (r.world_size or 0) > 1 else None
        transport = getattr(fields, "transport", None) or {}
        reason = getattr(fields, "reason", None)
        rows.append(
            [
                r.run_id,
                aggregate.fabric_label(r),
                aggregate.what_of(r),
                aggregate.subject_of(r),
                _cell(r.world_size),
                "-" if value is None else f"{value_text(value, unit)} {unit}",
                "-"
                if value is None or kind is None or fields is None
                else interval_text(kind.ci95(fields), unit, repetitions=1, samples=len(aggregate.run_samples(r))),
                "1 (baseline)"
                if eff == 1.0 and r.world_size == 1
                else _cell(eff, ".2f")
                + (f" (shared cores: {same:.2f} of the 1-rank total)" if same is not None else ""),
                _cell(comm, ".0%"),
                transport.get("verdict", "-"),
                (r.status or "-") + (f": {reason}" if reason else ""),
                words_beside(r),
            ]
        )
    return header, _shown(rows)


def health_table(results: Sequence[Result]) -> tuple[list[str], list[list[str]]]:
    """Per run, the fabric-truth verdicts beside the numbers: is the figure plausible for the
    link, did the host and image fit, where the ranks sat, who lagged, who hung."""
    header = [
        "run",
        "plausibility (busbw / line rate)",
        "preflight",
        "placement",
        "stragglers",
        "stall / stop",
        "disturbance",
    ]
    rows = []
    for r in sorted(map(as_result, results), key=lambda x: x.run_id):
        fields = typed(r)
        plaus, placement, stall, interruption, preflight, stragglers = (
            beside(fields, name)
            for name in ("plausibility", "placement", "stall", "interruption", "preflight", "stragglers")
        )
        ratio = plaus.get("ratio")
        problems = "; ".join(f"rank {p.get('rank')}: {p.get('problem')}" for p in placement.get("problems") or [])
        slow = stragglers.get("ranks") or []
        stopped = (
            f"hanging: rank {', '.join(map(str, stall['hanging_ranks']))}"
            if stall.get("hanging_ranks")
            else "stalled, culprit unknown"
            if stall
            else f"interrupted by {interruption['signal']}"
            if interruption
            else "-"
        )
        rows.append(
            [
                r.run_id,
                (plaus.get("verdict") or "-") + (f" ({ratio:.2f})" if isinstance(ratio, float) else ""),
                preflight.get("verdict", "-"),
                (placement.get("verdict") or "-") + (f": {problems}" if problems else ""),
                ", ".join(f"rank {x['rank']} +{x['excess']:.0%}" for x in slow) or "-",
                stopped,
                "; ".join([disturbance_summary(r), *disturbance_causes(r)]),
            ]
        )
    return header, _shown(rows)


def points_table(points: list[aggregate.Point]) -> tuple[list[str], list[list[str]]]:
    """One row per point: repetitions aggregated (mean, CI across repetitions and iterations)."""
    header = [
        "series",
        "ranks",
        "metric",
        "mean",
        "95% CI",
        "repetitions",
        "samples",
        "scaling eff.",
        "comm share",
        "1-rank baseline",
        "disturbed runs",
    ]
    rows = []
    for p in sorted(points, key=lambda p: (p.benchmark, p.series, p.ranks)):
        rows.append(
            [
                p.series,
                str(p.ranks),
                f"{p.metric.label} ({p.metric.unit})",
                value_text(p.mean, p.metric.unit),
                interval_text(p.ci95, p.metric.unit, p.repetitions, p.n_samples),
                str(p.repetitions),
                str(p.n_samples),
                _cell(p.efficiency, ".2f")
                + (f" (shared cores: {p.same_cores:.2f} of the 1-rank total)" if p.same_cores is not None else "")
                + (
                    " (cannot be read: " + p.unreadable_because + ")"
                    if p.unreadable_because and p.efficiency is not None
                    else ""
                ),
                _cell(p.comm_fraction, ".0%"),
                "itself" if p.ranks == 1 else (p.baseline.series if p.baseline else "-"),
                (
                    f"all {p.repetitions} (kept to be named)"
                    if p.disturbed
                    else f"{len(p.left_out)} left out: " + ", ".join(str(x["run_id"]) for x in p.left_out)
                    if p.left_out
                    else "-"
                )
                + (f"; {len(p.unsteady)} unsteady kept: {', '.join(p.unsteady)}" if p.unsteady else ""),
            ]
        )
    return header, _shown(rows)
