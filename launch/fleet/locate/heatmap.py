"""The heat-map of pairwise bandwidth: node x node (matrix), as a PNG (matplotlib, also the
report's) and as an HTML table beside the pairs."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from launch.fleet.locate.pairs import Pair, Verdict

if TYPE_CHECKING:  # matplotlib is imported where the figure is drawn (launch.plotting)
    from matplotlib.figure import Figure

Grid = list[list[float | None]]
"""Node x node bandwidth, Gbit/s (None where a pair was not measured)."""


def matrix(nodes: list[str], pairs: list[Pair]) -> Grid:
    return bandwidth_grid(nodes, [(p.a, p.b, p.best_gbit_s) for p in pairs])


def bandwidth_grid(nodes: list[str], pairs: list[tuple[str, str, float | None]]) -> Grid:
    """Node x node bandwidth (symmetric; None where a pair was not measured)."""
    index = {n: i for i, n in enumerate(nodes)}
    grid: Grid = [[None] * len(nodes) for _ in nodes]
    for a, b, value in pairs:
        if a in index and b in index:
            grid[index[a]][index[b]] = grid[index[b]][index[a]] = value
    return grid


def heatmap_png(nodes: list[str], grid: Grid, reference: float, path: Path) -> None:
    from launch import plotting

    fig = heatmap_figure(nodes, grid, reference)
    fig.savefig(path)
    plotting.close(fig)


def heatmap_figure(nodes: list[str], grid: Grid, reference: float) -> Figure:
    """The pairwise bandwidth as a matplotlib figure (locate's heatmap.png, and the report's)."""
    from launch import plotting

    values = [[float("nan") if v is None else v / reference for v in row] for row in grid]
    fig, ax = plotting.subplots(figsize=(1.2 + 0.7 * len(nodes), 1.0 + 0.6 * len(nodes)))
    image = ax.imshow(values, cmap="RdYlGn", vmin=0, vmax=1.1)
    ax.set_xticks(range(len(nodes)), nodes)
    ax.set_yticks(range(len(nodes)), nodes)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v is not None:
                ax.text(j, i, f"{v * 1000:.0f}", ha="center", va="center", fontsize=8)
    ax.set_title(f"pair bandwidth, Mbit/s\ncolour: share of the {reference * 1000:.0f} Mbit/s reference", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046).set_label("share of the reference", fontsize=8)
    fig.tight_layout()
    return fig


def heatmap_html(nodes: list[str], grid: Grid, verdict: Verdict, pairs: list[Pair]) -> str:
    def colour(v: float | None) -> str:
        if v is None:
            return "#ddd"
        share = max(0.0, min(1.0, v / verdict.reference_gbit_s))
        return f"hsl({int(120 * share)}, 70%, 75%)"

    head = "".join(f"<th>{html.escape(n)}</th>" for n in nodes)
    rows = []
    for n, row in zip(nodes, grid):
        cells = "".join(
            f'<td style="background:{colour(v)}">{"" if v is None else f"{v * 1000:.0f}"}</td>' for v in row
        )
        rows.append(f"<tr><th>{html.escape(n)}</th>{cells}</tr>")
    table = "".join(
        f"<tr><td>{html.escape(p.a)}-{html.escape(p.b)}</td><td>{_num(p.bandwidth_gbit_s)}</td>"
        f"<td>{_num(p.remeasured_gbit_s)}</td><td>{_num(p.busbw_gbit_s)}</td>"
        f"<td>{html.escape(str(p.job_id))}.{html.escape(str(p.step_id))}</td>"
        f"<td>{html.escape(p.error or '')}</td></tr>"
        for p in pairs
    )
    named = "".join(f"<li>{html.escape(line)}</li>" for line in verdict.lines())
    return (
        "<!doctype html><meta charset='utf-8'><title>fabric-bench locate</title>"
        "<style>td,th{padding:4px 8px;border:1px solid #999;text-align:right}table{border-collapse:collapse}"
        "</style><h1>Pairwise bandwidth (Mbit/s)</h1>"
        f"<p>reference {verdict.reference_gbit_s * 1000:.0f} Mbit/s ({html.escape(verdict.reference_from)}); "
        f"a pair is slow below {verdict.threshold:g} x reference, confirmed by a second measurement.</p>"
        f"<ul>{named}</ul><table><tr><th></th>{head}</tr>{''.join(rows)}</table>"
        "<h2>Pairs</h2><table><tr><th>pair</th><th>p2p Gbit/s</th><th>again</th><th>allreduce busbw</th>"
        f"<th>step</th><th>error</th></tr>{table}</table>\n"
    )


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"
