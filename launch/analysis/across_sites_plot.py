"""A group across sites as a figure (launch.analysis.across_sites): each entry's figure of merit
with its 95 % CI, one series per set of comparable entries (stack and benchmark version), and the
site's baseline CI where it has one, drawn beside its entry."""

from __future__ import annotations

import math
import textwrap

from matplotlib.figure import Figure

from launch import plotting


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


def _set_name(count: int, one: dict) -> str:
    """A set's legend entry: the comparable one, or what sets another apart, in a few words."""
    if count == 0:
        return f"comparable (stack {str(one['stack'])[:12]}, version {str(one['version'])[:7]})"
    apart = "; ".join(reason.split(":", 1)[0] for reason in one["not_beside_first"])
    return f"apart: {apart}"


def plot_group(group: dict) -> Figure:
    """One row per entry (site · fabric), the first set's rows on top; the legend below the rows."""
    entries = [(count, e) for count, one in enumerate(group["sets"]) for e in one["entries"]]
    legend_rows = len(group["sets"]) + 1  # the sets and the baseline
    fig, ax = plotting.subplots(figsize=(8, max(3.0, 1.6 + 0.45 * (len(entries) + legend_rows))), dpi=100)
    ax.set_title("\n".join(textwrap.wrap(f"Across sites: {group['words']}", 70)), fontsize="medium")
    ax.set_xlabel(f"{group['figure']['label']} ({group['figure']['unit']}), mean with 95 % CI")
    ax.grid(True, alpha=0.3)
    for count, one in enumerate(group["sets"]):
        rows = [(row, e) for row, (n, e) in enumerate(entries) if n == count]
        ax.errorbar(
            [e["mean"] for _, e in rows],
            [row for row, _ in rows],
            xerr=[_finite(e["ci95"]) for _, e in rows],
            fmt="o" if count == 0 else "s",
            capsize=3,
            label=_set_name(count, one),
        )
    based = [(row, e["baseline"]["ci95"]) for row, (_, e) in enumerate(entries) if e["baseline"]["ci95"]]
    for count, (row, (low, high)) in enumerate(based):
        ax.plot(
            [low, high],
            [row + 0.25, row + 0.25],
            color="grey",
            linewidth=3,
            label="_baseline" if count else "site's baseline 95 % CI",
        )
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels([f"{e['site']} · {e['fabric']}" for _, e in entries], fontsize="small")
    # room below the last row: the legend (placed where it covers nothing) goes there
    ax.set_ylim(len(entries) - 0.5 + 0.5 * legend_rows, -0.5)
    return fig
