"""`fabric-bench baseline`: is the newest run of each key normal for this site, and since when did it
change (launch.analysis.baseline; docs/baselines.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from launch.errors import UsageError
from launch.analysis import baseline, metrics
from launch.results import store
from launch.shapes import terminal


def show(
    benchmark: Optional[str] = typer.Option(None, help="only this kind: train | allreduce | ..."),
    fabric: Optional[str] = typer.Option(None, help="only this fabric preset"),
    model: Optional[str] = typer.Option(None, help="only this model"),
    ranks: Optional[int] = typer.Option(None, help="only this world size"),
    key: Optional[str] = typer.Option(None, help="only the key with this id (or a prefix of it)"),
    run: Optional[str] = typer.Option(None, help="judge this run (a run id or its prefix) instead of the newest"),
    runs: int = typer.Option(baseline.WINDOW_RUNS, help="the window: the last this many clean runs"),
    days: Optional[float] = typer.Option(None, help="the window: the clean runs of the days before the run instead"),
    origin: list[str] = typer.Option(
        [],
        help="this site's origin hosts, as patterns ('login*'; repeatable; default: $FABRIC_BENCH_ORIGINS, "
        "else this host)",
    ),
    any_origin: bool = typer.Option(
        False,
        help="every origin's results, those pulled from other sites included, each labelled with the site that "
        "signed it (in the words, --json and the metrics); without it, this site's own runs only, never pulled ones",
    ),
    since: bool = typer.Option(False, help="name the first run after each key's last change"),
    changes: bool = typer.Option(False, help="list every change point of each key's history"),
    plot: Optional[Path] = typer.Option(None, help="write the keys' histories, changes and stacks as a PNG"),
    metrics_dir: Optional[Path] = typer.Option(
        None,
        help=f"write each key's metrics here (node_exporter's textfile collector; default: ${metrics.METRICS_ENV})",
    ),
    as_json: bool = typer.Option(False, "--json", help="each key's verdict record (baseline.json's form) as JSON"),
):
    """Per comparable key, this site's baseline (median, 95 % bootstrap CI, spread, count of clean
    runs; disturbed runs left out, a new stack starting anew) and the newest run's verdict:
    normal, slow or fast, with its difference and confidence; too few runs: 'no baseline yet'.
    Only this site's own runs (written here, never pulled), unless --any-origin.

    Examples:
      fabric-bench baseline --fabric ethernet --since
      fabric-bench baseline --benchmark allreduce --plot history.png --metrics-dir /var/lib/node_exporter
      fabric-bench baseline --any-origin --json
    """
    filters = {"benchmark": benchmark, "fabric": fabric, "model": model, "world_size": ranks}
    origins = None if any_origin else baseline.origin_patterns(origin)
    reports = baseline.survey(store.connect(), origins, runs, days, run, **filters)
    reports = [r for r in reports if key is None or r.key.id.startswith(key)]
    if not reports:
        raise UsageError(
            f"no ok runs in the store {store.store_path()} match"
            + ("" if origins is None else f" (origins {', '.join(origins)}; --any-origin for all)")
        )
    where = metrics.directory(metrics_dir)
    for report in reports:
        if where is not None:
            metrics.write(where, report.verdict.record())
    if as_json:
        print(
            json.dumps([{**r.verdict.record(), "changes": [c.words() for c in r.changes]} for r in reports], indent=2)
        )
    else:
        for report in reports:
            print_report(report, since, changes)
    if plot is not None:
        from launch.analysis.baseline_plot import plot_histories

        drawn = plot_histories(reports, plot)
        print(
            terminal(f"{plot}: the histories of {drawn} key{'s' if drawn != 1 else ''}"),
            file=sys.stderr if as_json else sys.stdout,
        )
    if where is not None:
        print(terminal(f"metrics: {len(reports)} files in {where}"), file=sys.stderr if as_json else sys.stdout)


def print_report(report: baseline.KeyReport, since: bool, changes: bool) -> None:
    verdict, history = report.verdict, report.history
    run = verdict.run
    clean = sum(1 for r in history if not r.disturbed)
    pulled = [r.pulled_from for r in history if r.pulled_from]  # --any-origin: other sites' runs, named
    sites = f", {len(pulled)} pulled from {', '.join(sorted(set(pulled)))}" if pulled else ""
    lines = [
        f"{report.key.words()}  [key {report.key.id}]",
        f"  history: {len(history)} run{'s' if len(history) != 1 else ''}, {clean} clean{sites}, {stamp(history[0].when)} to {stamp(history[-1].when)}; "
        f"stack {run.stack[:19]}, bundle {run.version[:7]}",
    ]
    if verdict.baseline.started:
        lines.append(f"  {verdict.baseline.started}")
    lines.append(f"  baseline: {verdict.baseline.words()}")
    lines.append(
        f"  run {run.run_id}: {baseline.sig(run.value, 4)} {run.figure.unit}: {verdict.words()}"
        + ("; unsteady" if run.unsteady else "")
    )
    if changes:
        lines += [f"  {c.words()}" for c in report.changes] or ["  no change point"]
    if since:
        last = report.changes[-1] if report.changes else None
        lines.append(
            f"  since {last.run_id}, the first run after the last change: {last.what()}"
            if last
            else f"  since {history[0].run_id}: no change in {clean} clean runs"
        )
    for line in lines:
        print(terminal(line))


def stamp(when: Optional[float]) -> str:
    return baseline.stamp(when)


def register(app: typer.Typer) -> None:
    app.command("baseline")(show)
