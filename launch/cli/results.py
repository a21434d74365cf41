"""`fabric-bench results list|show|export|index`: the results history (launch.results.store)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from launch.console import console as make_console
from launch.results import store
from launch.shapes import rich_text, terminal

results_app = typer.Typer(help="The results history: every result.json, indexed in SQLite.", no_args_is_help=True)
LIST_COLUMNS = (
    "run_id",
    "fabric",
    "engine",
    "model",
    "world_size",
    "total_img_per_s",
    "ci95_img_per_s",
    "comm_fraction",
    "status",
    "transport",
    "disturbance",
)


def _filters(benchmark, engine, model, fabric, ranks, status, transport) -> dict:
    return {
        "benchmark": benchmark,
        "engine": engine,
        "model": model,
        "fabric": fabric,
        "world_size": ranks,
        "status": status,
        "transport": transport,
    }


def _cell(value) -> str:
    """A table cell: indexed values come from results, perhaps another site's (escapes removed,
    markup inert)."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else rich_text(value)


# shared filter options
BENCHMARK = typer.Option(None, help="train | allreduce | ...")
ENGINE = typer.Option(None, help="horovod | ddp | native")
MODEL = typer.Option(None, help="model name")
FABRIC = typer.Option(None, help="fabric preset")
RANKS = typer.Option(None, help="world size")
STATUS = typer.Option(None, help="ok | failed | transport_mismatch")
TRANSPORT = typer.Option(None, help="transport verdict: match | mismatch | unverified")


@results_app.command("list")
def list_results(
    benchmark: Optional[str] = BENCHMARK,
    engine: Optional[str] = ENGINE,
    model: Optional[str] = MODEL,
    fabric: Optional[str] = FABRIC,
    ranks: Optional[int] = RANKS,
    status: Optional[str] = STATUS,
    transport: Optional[str] = TRANSPORT,
    limit: int = typer.Option(50, help="at most this many, newest first (0: all)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable JSON"),
):
    """List indexed results, newest first.

    Example: fabric-bench results list --fabric ethernet --status ok
    """
    rows = store.query(
        store.connect(), limit or None, **_filters(benchmark, engine, model, fabric, ranks, status, transport)
    )
    if as_json:
        print(json.dumps([{c: row[c] for c in (*store.COLUMNS, "path")} for row in rows], indent=2))
        return
    table = Table(title=rich_text(f"results ({store.store_path()})"))
    for column in LIST_COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in LIST_COLUMNS))
    make_console().print(table)


@results_app.command()
def show(run_id: str = typer.Argument(..., help="run id (or a unique prefix)")):
    """Print one indexed result as JSON (as the current schema reads it: a result from before the
    disturbance record says "not recorded"); whether it was disturbed, and by what, goes to stderr.

    Example: fabric-bench results show 20260101T120000-torch-ddp
    """
    from launch.results.result import disturbance_causes, disturbance_summary
    from launch.results.schema import migrate

    found = migrate(store.get(store.connect(), run_id))
    print(json.dumps(found, indent=2, sort_keys=True))
    for line in [disturbance_summary(found), *disturbance_causes(found)]:
        print(f"disturbance: {terminal(line)}", file=sys.stderr)


@results_app.command()
def export(
    benchmark: Optional[str] = BENCHMARK,
    engine: Optional[str] = ENGINE,
    model: Optional[str] = MODEL,
    fabric: Optional[str] = FABRIC,
    ranks: Optional[int] = RANKS,
    status: Optional[str] = STATUS,
    transport: Optional[str] = TRANSPORT,
    _csv: bool = typer.Option(True, "--csv", hidden=True),  # accepted for old scripts; CSV is the only format
    output: Optional[Path] = typer.Option(None, help="file to write (default: stdout)"),
):
    """Export indexed results as CSV (one row per run, the indexed columns and path).

    Example: fabric-bench results export --engine horovod --output horovod.csv
    """
    rows = store.query(store.connect(), None, **_filters(benchmark, engine, model, fabric, ranks, status, transport))
    out = open(output, "w", newline="", encoding="utf-8") if output else sys.stdout
    shown = terminal if out.isatty() else None  # a file gets the values as held; a terminal, no escapes
    try:
        writer = csv.writer(out)
        writer.writerow([*store.COLUMNS, "path"])
        for row in rows:
            values = [row[c] for c in (*store.COLUMNS, "path")]
            writer.writerow([shown(v) if shown and isinstance(v, str) else v for v in values])
    finally:
        if output:
            out.close()


@results_app.command("index")
def index(directory: Path = typer.Argument(..., help="a results or sweep directory")):
    """(Re)index every result.json under DIRECTORY.

    Example: fabric-bench results index results/
    """
    count, problems = store.index_tree(directory)
    for problem in problems:
        print(terminal(problem), file=sys.stderr)
    print(f"indexed {count} results into {store.store_path()}")


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
