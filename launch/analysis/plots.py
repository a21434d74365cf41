"""The report's figures (matplotlib, Agg): throughput, efficiency and communication share vs
ranks, the verdicts' ratios, a size sweep's bus bandwidth vs message size, predicted vs measured;
and what a figure shows, read back from it (figure_data) and what of it is drawn off its edges.

Where a series' ranks share one host's cores (aggregate.Point.shares_cores), N x the 1-rank
throughput is no ideal: the throughput plot draws the 1-rank total beside it and the
efficiency plot the same-cores efficiency beside the per-rank one (both `same_cores` in
figure_data). A figure whose error bars include a point from one run says that those are over
its iterations only (`notes`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from launch import plotting  # names from other sites are text: "$x$" is not math
from launch.kinds import kind_of
from launch.analysis import aggregate
from launch.results.result import Result, as_result, field_of, typed


def _axes(title: str, xlabel: str, ylabel: str, size=(7, 4.5)):
    fig, ax = plotting.subplots(figsize=size, dpi=100)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _rank_ticks(ax, curves: dict) -> None:
    ax.set_xticks(sorted({p.ranks for points in curves.values() for p in points}))


def _ci(value) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


IDEAL_LABEL = "ideal scaling (N x 1-rank throughput)"
SAME_CORES_LABEL = "same cores: the 1-rank total (ranks share its cores)"
SAME_CORES_EFFICIENCY = "same-cores efficiency (total at N / total at 1)"
ONE_RUN_NOTE = "a point from one run: its mean and 95 % CI are over that run's iterations only"


def _note(ax, text: str) -> None:
    ax.text(0.01, 0.01, text, transform=ax.transAxes, fontsize="x-small", color="grey", gid="note")


def _one_run_note(ax, curves: dict[str, list[aggregate.Point]]) -> None:
    if any(p.repetitions == 1 for points in curves.values() for p in points):
        _note(ax, ONE_RUN_NOTE)


def plot_throughput(curves: dict[str, list[aggregate.Point]]) -> Figure:
    fig, ax = _axes("Training throughput vs ranks", "ranks (GPUs on GPU runs)", "throughput (img/s, total)")
    ideal_drawn = False
    for name, points in curves.items():
        xs = [p.ranks for p in points]
        bars = ax.errorbar(
            xs, [p.mean for p in points], yerr=[_ci(p.ci95) for p in points], marker="o", capsize=3, label=name
        )
        one = next((p for p in points if p.ranks == 1), None)
        if one is not None and len(xs) > 1:
            # hidden from the series list (its own entry in the legend): N x the 1-rank throughput
            (line,) = ax.plot(
                xs,
                [x * one.mean for x in xs],
                linestyle=":",
                color=bars.lines[0].get_color(),
                alpha=0.8,
                label=f"_ideal {name}",
            )
            line.set_gid("ideal")
            ideal_drawn = True
        if one is not None and any(p.shares_cores for p in points):
            (flat,) = ax.plot(
                xs, [one.mean for _ in xs], linestyle="--", color=bars.lines[0].get_color(), label=f"_same {name}"
            )
            flat.set_gid("same-cores")
    if ideal_drawn:
        (proxy,) = ax.plot([], [], linestyle=":", color="grey", label=IDEAL_LABEL)
        proxy.set_gid("legend-only")
    if any(line.get_gid() == "same-cores" for line in ax.get_lines()):
        (proxy,) = ax.plot([], [], linestyle="--", color="grey", label=SAME_CORES_LABEL)
        proxy.set_gid("legend-only")
    _one_run_note(ax, curves)
    _rank_ticks(ax, curves)
    return fig


def plot_efficiency(curves: dict[str, list[aggregate.Point]]) -> Figure:
    fig, ax = _axes(
        "Scaling efficiency vs ranks",
        "ranks (GPUs on GPU runs)",
        "scaling efficiency (throughput(N) / N x throughput(1))",
    )
    for name, points in curves.items():
        if not any(p.ranks == 1 for p in points):
            continue  # no 1-rank baseline in this set: no efficiency
        (line,) = ax.plot([p.ranks for p in points], [p.efficiency for p in points], marker="o", label=name)
        shared = [p for p in points if p.same_cores is not None]
        if shared:  # beside the per-rank figure, which reads ~1/N by construction there
            (same,) = ax.plot(
                [1] + [p.ranks for p in shared],
                [1.0] + [p.same_cores or 0.0 for p in shared],
                marker="^",
                linestyle="--",
                color=line.get_color(),
                label=f"_same {name}",
            )
            same.set_gid("same-cores")
    if any(line.get_gid() == "same-cores" for line in ax.get_lines()):
        (proxy,) = ax.plot([], [], linestyle="--", marker="^", color="grey", label=SAME_CORES_EFFICIENCY)
        proxy.set_gid("legend-only")
    ax.axhline(1.0, color="grey", linestyle=":", label="_ideal")
    (proxy,) = ax.plot([], [], linestyle=":", color="grey", label="ideal (1.0)")
    proxy.set_gid("legend-only")
    _one_run_note(ax, curves)
    _rank_ticks(ax, curves)
    return fig


def plot_comm_share(curves: dict[str, list[aggregate.Point]]) -> Figure:
    fig, ax = _axes(
        "Communication share of a training step",
        "ranks (GPUs on GPU runs)",
        "communication share (fraction of step time)",
    )
    for name, points in curves.items():
        shown = [p for p in points if p.comm_fraction is not None]  # never a 1-rank point
        if shown:
            ax.plot([p.ranks for p in shown], [p.comm_fraction for p in shown], marker="s", label=name)
    ax.set_ylim(0, 1)
    _rank_ticks(ax, curves)
    return fig


def _group_label(row: dict) -> str:
    knobs = [
        f"{k} {row[k]}"
        for k in ("allreduce", "gpudirect", "fabric")
        if k in row and row[k] != "default" and k != row["axis"]
    ]
    return f"{row['model']} {row['engine']} {row['nodes']}x{row['ranks_per_node']}" + (
        f" {' '.join(knobs)}" if knobs else ""
    )


def plot_verdicts(all_verdicts: dict) -> Figure:
    """Every verdict row: the speed ratio (throughput ratio, inverse time ratio) with its 95 % CI."""
    rows = [r for data in all_verdicts.values() for r in data["rows"]]
    fig, ax = _axes(
        "Verdicts: relative speed with 95 % CI",
        "speed relative to the reference\n(throughput or bandwidth ratio; inverse time ratio for the halo proxy)",
        "",
        size=(8, max(3.0, 1.2 + 0.32 * len(rows))),
    )
    labels = []
    by_series: dict[str, list[tuple[int, dict]]] = {}
    for i, row in enumerate(rows):
        labels.append(_group_label(row))
        by_series.setdefault(f"{row['value']} vs {row['reference']}", []).append((i, row))
    for name, items in by_series.items():
        xs = [row["speed_ratio"] for _, row in items]
        lows = [row["speed_ratio"] - row["speed_ci95"][0] if row["speed_ci95"] else 0.0 for _, row in items]
        highs = [row["speed_ci95"][1] - row["speed_ratio"] if row["speed_ci95"] else 0.0 for _, row in items]
        ax.errorbar(xs, [i for i, _ in items], xerr=[lows, highs], fmt="o", capsize=3, label=name)
    ax.axvline(1.0, color="grey", linestyle=":", label="_no difference")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
    return fig


def _sweep_label(r: Result) -> str:
    """fabric/how it communicated xRANKS: a sweep's line."""
    return f"{aggregate.fabric_label(r)}/{aggregate.what_of(r)} x{field_of(r, 'world_size')}"


def plot_busbw(results: Sequence[Result], title: str) -> Figure:
    """A size sweep's busbw per size, one line per run, each run's points as its kind draws them
    (launch.kinds: Kind.curve); `title`: its kind's (sizes_plot)."""
    fig, ax = _axes(title, "message size (bytes)", "bus bandwidth (Gbit/s)")
    read = [as_result(r) for r in results]  # each read through its typed model once
    for r in read:
        kind, fields = kind_of(r), typed(r)
        points = kind.curve(fields) if kind is not None and fields is not None else []
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=_sweep_label(r))
    rates = sorted({rate for r in read if (rate := aggregate.number(field_of(r, "link_rate_gbit_s"))) is not None})
    for rate, style in zip(rates, ["--", ":", "-.", (0, (5, 1, 1, 1))] * len(rates)):
        ax.axhline(rate, linestyle=style, color="black", label=f"link rate {rate:g} Gbit/s")
    ax.set_xscale("log", base=2)
    # plain-text ticks: math text is off (names from other sites are text), so log ticks' "$2^{10}$" would show raw
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: size_text(value)))
    return fig


def size_text(nbytes: float) -> str:
    """'512 B', '64 KiB', '8 MiB', '2 GiB': a message size as its axis shows it."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def plot_predicted(preds: dict) -> Figure:
    fig, ax = _axes("Alpha-beta model: predicted vs measured step time", "ranks (GPUs on GPU runs)", "step time (ms)")
    for name, points in preds.items():
        xs = [x for x, _, _ in points]
        (line,) = ax.plot(xs, [m for _, m, _ in points], marker="o", label=f"measured {name}")
        ax.plot(
            xs, [p for _, _, p in points], marker="x", linestyle="--", color=line.get_color(), label=f"predicted {name}"
        )
    ax.set_xticks(sorted({x for points in preds.values() for x, _, _ in points}))
    return fig


def figure_data(fig: Figure) -> dict:
    """What a figure shows, read back from matplotlib: title, axis labels, every labelled line
    (`series`) and the ideal-scaling lines drawn beside them (`ideal`)."""
    ax = fig.axes[0]
    # an errorbar's label sits on its container; its data line is the container's first
    named = [(str(c.get_label()), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
    named += [(str(line.get_label()), line) for line in ax.get_lines()]
    series, ideal, same = [], [], []
    for label, line in named:
        xs, ys = line.get_data()
        entry = {"name": label, "x": [float(v) for v in xs], "y": [float(v) for v in ys]}  # type: ignore[union-attr,arg-type]
        if line.get_gid() == "ideal":
            ideal.append({**entry, "name": label.removeprefix("_ideal ")})
        elif line.get_gid() == "same-cores":
            same.append({**entry, "name": label.removeprefix("_same ")})
        elif not label.startswith("_") and line.get_gid() != "legend-only":
            series.append(entry)
    data: dict = {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "series": series}
    if ideal:
        data["ideal"] = ideal
    if same:
        data["same_cores"] = same
    notes = [str(t.get_text()) for t in ax.texts if t.get_gid() == "note"]
    if notes:
        data["notes"] = notes
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    if ticks and not ax.get_ylabel():
        data["yticklabels"] = ticks
    return data


def cut_off_text(fig: Figure) -> list[str]:
    """What of the figure is drawn past its edges: each axes (its labels, ticks, title, legend)
    whose drawn extent leaves the image, named by its title."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas (the backend set above)
    width, height = fig.canvas.get_width_height()
    out = []
    for ax in fig.axes:
        box = ax.get_tightbbox(renderer)
        if box is not None and (box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1):
            out.append(
                f"{ax.get_title() or 'axes'}: drawn over [{box.x0:.0f}, {box.x1:.0f}] x [{box.y0:.0f}, "
                f"{box.y1:.0f}] px of {width} x {height}"
            )
    return out
