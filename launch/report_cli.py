"""`fabric-bench report DIR...`: tables and plots of results (launch.report)."""
from __future__ import annotations

from pathlib import Path

import typer


def report(
    dirs: list[Path] = typer.Argument(..., help="result directories, sweep directories or result.json files"),
    output: Path = typer.Option(Path("report"), help="directory for the PNGs, report.html, report_data.json"),
    title: str = typer.Option("fabric-bench report", help="page title"),
):
    """Tables and plots of results: PNGs and one self-contained HTML page.

    Throughput and scaling efficiency vs ranks per fabric, communication share,
    allreduce bus bandwidth vs message size with the link rate, and the alpha-beta
    model's predicted vs measured times where it ran.

    Example: fabric-bench report sweeps/resnet50-ib sweeps/resnet50-eth --output report/
    """
    from launch.report import build

    data = build(dirs, output, title)
    for name, plot in data["plots"].items():
        print(f"{output / plot['png']}: {plot['title']} ({len(plot['series'])} series)")
    print(f"{output / 'report.html'} ({data['runs']} runs)")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
