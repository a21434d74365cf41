"""Rich tables of training results, with scaling efficiency against 1-rank runs
(the baseline rule and the aggregation are launch.analysis.aggregate's), and of verdicts.
Every string from a result (perhaps another site's: a model name, a series, a reason) reaches a
cell through launch.shapes.rich_text: no escape sequence, and markup printed as written."""

from __future__ import annotations

from rich.table import Table

from launch.analysis import aggregate
from launch.kinds.train import training_row, training_table as train_columns
from launch.figures import interval_text, value_text
from launch.results.result import Result, as_result, disturbed, typed
from launch.shapes import rich_text, terminal


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def efficiency_cell(eff: float | None, unreadable: str | None) -> str:
    """An efficiency, marked where it is built on a disturbed run (launch.disturbance)."""
    return fmt(eff, ".2f") + (" [yellow](disturbed)[/yellow]" if eff is not None and unreadable else "")


def training_table(results: list[Result], title: str = "Training throughput") -> Table:
    """One row per run (the train kind's cells: launch.kinds.train); efficiency against the aggregated
    1-rank baseline of its series (1 on one rank), no communication share on one rank; whether the
    run was disturbed."""
    table = train_columns(rich_text(title))
    read = [as_result(r) for r in results]  # each read through its typed model once (a file's is one already)
    points = aggregate.aggregate(read)
    for r in read:
        fields = typed(inert(r))  # the kind's row adds its own markup around these
        if fields is None:
            continue  # malformed: launch.results.result.malformed says why where results are loaded
        point = aggregate.point_of(points, r)
        eff = point.run_efficiency(r) if point is not None else None
        unreadable = "the run" if disturbed(r) else point.unreadable_because if point is not None else None
        table.add_row(*training_row(fields, efficiency_cell(eff, unreadable)))
    return table


def inert(value):
    """A result's strings, every one through rich_text (its numbers and shape kept)."""
    if isinstance(value, str):
        return rich_text(value)
    if isinstance(value, dict):
        return {key: inert(item) for key, item in value.items()}
    return [inert(item) for item in value] if isinstance(value, list) else value


def points_table(points: list[aggregate.Point], title: str) -> Table:
    """One row per point: repetitions aggregated."""
    table = Table(title=rich_text(title))
    for column in ("series", "ranks", "mean", "95% CI", "reps", "scaling eff.", "comm share", "disturbed", "baseline"):
        table.add_column(column, justify="left" if column in ("series", "baseline", "disturbed") else "right")
    for p in sorted(points, key=lambda p: (p.benchmark, p.series, p.ranks)):
        table.add_row(
            rich_text(p.series),
            str(p.ranks),
            f"{value_text(p.mean, p.metric.unit)} {p.metric.unit}",
            interval_text(p.ci95, p.metric.unit, p.repetitions, p.n_samples),
            str(p.repetitions),
            efficiency_cell(p.efficiency, p.unreadable_because),
            fmt(p.comm_fraction, ".0%"),
            disturbed_cell(p),
            "itself" if p.ranks == 1 else rich_text(p.baseline.series if p.baseline else "-"),
        )
    return table


def disturbed_cell(point: aggregate.Point) -> str:
    """'-', 'all 2 runs' (the point is only disturbed runs) or '1 left out'."""
    if point.disturbed:
        return f"all {point.repetitions} run{'s' if point.repetitions != 1 else ''}"
    return f"{len(point.left_out)} left out" if point.left_out else "-"


def verdict_tables(judged: dict, title: str = "") -> list:
    """A rich table and its paragraph per compared knob (launch.analysis.verdict)."""
    from rich.text import Text

    from launch.analysis.verdict import table_rows

    out: list = []
    for data in judged.values():
        heading = terminal(f"{title}verdict: {data['title']}")
        if data["rows"]:
            header, rows = table_rows(data)
            table = Table(
                title=rich_text(heading), caption=rich_text(f"reference {data['reference']}; {data['method']}")
            )
            for column in header:
                table.add_column(
                    column,
                    justify="left"
                    if column in ("benchmark", "model", "engine/backend", "compared", "verdict")
                    else "right",
                )
            for row in rows:
                table.add_row(*map(rich_text, row))
            out.append(table)
        else:
            out.append(Text(heading))
        out.append(Text(terminal(data["paragraph"])))
    return out
