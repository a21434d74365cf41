"""`fabric-bench baseline --plot`: each key's history (matplotlib, Agg), its change points and its
stack changes marked, the newest baseline's median and CI as a band, the judged run by its verdict."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Sequence

from launch.errors import UsageError
from launch.analysis.baseline import KeyReport, stack_changes

MAX_PANELS = 8
COLOURS = {"normal": "tab:green", "slow": "tab:red", "fast": "tab:blue"}


def plot_histories(reports: Sequence[KeyReport], png: Path) -> int:
    """One panel per key (at most MAX_PANELS: choose keys with the filters); returns the panels."""
    if len(reports) > MAX_PANELS:
        raise UsageError(f"--plot draws at most {MAX_PANELS} keys, {len(reports)} match; narrow them (--key, --fabric)")
    from launch import plotting  # names from results are text: "$x$" is not math

    fig, axes = plotting.subplots(len(reports), 1, figsize=(8, 3.2 * len(reports)), dpi=100, squeeze=False)
    for ax, report in zip(axes[:, 0], reports):
        history, verdict = report.history, report.verdict
        figure = verdict.run.figure
        clean = [(i, r) for i, r in enumerate(history) if not r.disturbed]
        noisy = [(i, r) for i, r in enumerate(history) if r.disturbed]
        ax.plot([i for i, _ in clean], [r.value for _, r in clean], "o-", color="tab:grey", ms=4, label="clean run")
        if noisy:
            ax.plot(
                [i for i, _ in noisy],
                [r.value for _, r in noisy],
                "x",
                color="tab:orange",
                label="disturbed (left out)",
            )
        base = verdict.baseline
        ci = base.figure_ci()
        if base.ready and ci is not None:
            used = [i for i, r in enumerate(history) if r.run_id in base.run_ids]
            span = (min(used) - 0.3, max(used) + 0.3)
            ax.fill_between(span, *ci, color="tab:green", alpha=0.15, label="baseline 95 % CI")
            ax.hlines(base.figure_of(base.median), *span, colors="tab:green", label="baseline median")
        at = history.index(verdict.run)
        ax.plot(
            [at],
            [verdict.run.value],
            "D",
            ms=8,
            color=COLOURS.get(verdict.verdict, "black"),
            label=f"judged: {verdict.verdict}",
        )
        for n, change in enumerate(report.changes):
            where = next(i for i, r in enumerate(history) if r.run_id == change.run_id) - 0.5
            ax.axvline(where, color="tab:red", ls="--", label="change point" if n == 0 else None)
        for n, where in enumerate(stack_changes(history)):
            ax.axvline(where - 0.5, color="tab:purple", ls=":", lw=2, label="new stack or bundle" if n == 0 else None)
        ax.set_title("\n".join([*textwrap.wrap(report.key.words(), 90), figure.label]), fontsize="small")
        ax.set_xlabel("run (oldest to newest)")
        ax.set_ylabel(figure.unit)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plotting.close(fig)
    return len(reports)
