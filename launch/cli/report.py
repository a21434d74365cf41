"""`fabric-bench report DIR...`: the verdict, tables and plots of results (launch.analysis.report)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from launch.shapes import terminal


def report(
    dirs: Optional[list[Path]] = typer.Argument(
        None, help="result directories, sweep directories or result.json files (none: --pulled alone)"
    ),
    output: Path = typer.Option(Path("report"), help="directory for the PNGs, report.html, report_data.json"),
    title: str = typer.Option("fabric-bench report", help="page title"),
    baseline_fabric: Optional[str] = typer.Option(
        None,
        help="the reference fabric of the verdict table (default: the first in the sweep's experiment, "
        "else the first by name)",
    ),
    study: Optional[str] = typer.Option(
        None,
        help="add a predicted study's answer and figure: hpec2020-today "
        "(launch.predict.study; `fabric-bench predict --study`)",
    ),
    keep_disturbed: bool = typer.Option(
        False,
        help="keep runs whose disturbance record says disturbed in the "
        "points and verdicts (left out by default; docs/disturbance.md)",
    ),
    pulled: bool = typer.Option(
        False,
        "--pulled",
        help="add every result pulled from other sites (`fabric-bench results pull`): the page opens "
        "with them side by side where comparable (docs/sharing.md)",
    ),
):
    """The verdict table first, then tables and plots of results: PNGs and one self-contained HTML page.

    Verdicts: per group (model, nodes, ranks per node, engine, allreduce, gpudirect)
    each fabric's throughput (time per iteration for the halo proxy, busbw for
    allreduce) relative to the reference fabric, the ratio's 95 % CI (Welch on
    log-metric over repetitions and iterations) and 'no significant difference'
    or 'N % slower/faster'; the same for NCCL vs MPI and GPUDirect where varied.
    Plots: throughput and scaling efficiency vs ranks per fabric with the ideal,
    the verdict ratios, communication share, allreduce bus bandwidth vs message
    size with the link rate, and the alpha-beta model's predicted vs measured times.

    Across sites: results of several sites (pulled ones, or results whose origins
    differ) open the page with a table per comparable group (kind, model or
    message size, nodes x ranks, ...): side by side only what ran on one stack and
    one benchmark version, with each site's baseline and how complete its system
    description is; every other set is named with why it is apart.

    Example: fabric-bench report sweeps/resnet50-ib sweeps/resnet50-eth --output report/ --baseline-fabric ethernet

    Example: fabric-bench report --pulled results/ --output report/
    """
    from launch.errors import UsageError
    from launch.analysis.across_sites import lines as across_lines
    from launch.analysis.report import build
    from launch.sharing.pulled import pulled_in

    try:
        records = pulled_in()
    except UsageError as exc:
        if pulled:
            raise
        print(terminal(f"fabric-bench: warning: pulled results not read: {exc}"), file=sys.stderr)
        records = []
    named = [Path(d).resolve() for d in dirs or []]
    # each pulled result once: not again where a directory named holds it already
    more = [p for r in records for p in r.result_paths if pulled and not any(p.is_relative_to(d) for d in named)]
    chosen = [*(dirs or []), *more]
    if not chosen:
        raise UsageError("no results to report: name result directories, or --pulled for those pulled from other sites")
    data = build(chosen, output, title, baseline_fabric, study, keep_disturbed, pulled=records)
    for line in across_lines(data["across_sites"]) if data.get("across_sites") else ():
        print(terminal(line))
    for line in data["stacks"]:
        print(f"stack: {terminal(line)}")
    for judged in data["verdicts"].values() if data["runs"] else ():  # no runs (a locate directory): no verdict
        print(terminal(f"verdict ({judged['title']}): {judged['paragraph']}"))
    for line in (data.get("study") or {}).get("answer", []):
        print(terminal(f"study {study} (predicted): {line}"))
    for plot in data["plots"].values():
        series = len(plot["series"])
        print(
            terminal(f"{output / plot['png']}: {'; '.join(plot['title'].splitlines())}")
            + (f" ({series} series)" if series else "")
        )
    located = len(data.get("locate") or [])
    print(
        f"{output / 'report.html'} ({data['runs']} runs"
        + (f", {located} locate result{'s' if located != 1 else ''})" if located else ")")
    )


def register(app: typer.Typer) -> None:
    app.command("report")(report)
