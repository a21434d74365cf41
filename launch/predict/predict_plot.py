"""predict.json and predict.png of a prediction (launch.predict.predict): the fabrics side by side;
for a cluster prediction (launch.predict.predict_cluster) and a study (launch.predict.study) each
line with its range drawn as a band."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from launch.errors import UsageError

if TYPE_CHECKING:  # matplotlib is imported where a figure is drawn (launch.plotting)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def write(data: dict, out: Path) -> None:
    from launch import plotting

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the prediction to {out}: {exc.strerror}") from None
    (out / "predict.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if data.get("kind") == "cluster":
        _cluster_figure(data, out / "predict.png")
        return
    fig, (left, right) = plotting.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    w = data["workload"]
    for fabric in data["fabrics"]:
        points = [p for p in data["points"] if p["fabric"] == fabric["name"]]
        label = fabric["name"] + (" (nominal)" if fabric["source"].startswith("nominal") else " (fitted)")
        xs = [p["ranks"] for p in points]
        (line,) = left.plot(xs, [p["img_per_s"] for p in points], marker="o", label=label)
        right.plot(xs, [p["scaling_efficiency"] for p in points], marker="o", color=line.get_color(), label=label)
        right.plot(
            xs,
            [p["scaling_efficiency_no_overlap"] for p in points],
            linestyle="--",
            color=line.get_color(),
            alpha=0.6,
            label="_no overlap",
        )
    ranks = sorted({p["ranks"] for p in data["points"]})
    left.plot(
        ranks,
        [n * w["batch_size"] / w["compute_step_s"] for n in ranks],
        linestyle=":",
        color="grey",
        label="ideal scaling",
    )
    right.axhline(1.0, linestyle=":", color="grey")
    right.plot([], [], linestyle="--", color="grey", label="no-overlap bound")
    _throughput_and_efficiency_axes(left, right, "ranks")
    left.set_yscale("log")
    right.set_ylim(0, 1.05)
    fig.suptitle(
        f"predicted: {w['engine']}, {w['gradient_bytes'] / 2**20:.1f} MiB gradients, compute step "
        f"{w['compute_step_s'] * 1e3:.1f} ms"
    )
    fig.tight_layout()
    fig.savefig(out / "predict.png")
    plotting.close(fig)


def _throughput_and_efficiency_axes(left: Axes, right: Axes, xlabel: str) -> None:
    """Both figures' two panels: throughput and scaling efficiency against log2 ranks."""
    for ax, ylabel in ((left, "throughput (img/s, total)"), (right, "scaling efficiency")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")


def _band(ax: Axes, xs: Sequence[float], mids: Sequence[float], ranges: Sequence[Sequence[float]], label: str) -> None:
    (line,) = ax.plot(xs, mids, marker="o", label=label)
    ax.fill_between(xs, [r[0] for r in ranges], [r[1] for r in ranges], color=line.get_color(), alpha=0.2)


def _cluster_figure(data: dict, png: Path) -> None:
    from launch import plotting

    fig, (left, right) = plotting.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for c in data["clusters"]:
        points = [p for p in data["points"] if p["cluster"] == c["name"]]
        xs = [p["ranks"] for p in points]
        _band(left, xs, [p["img_per_s"] for p in points], [p["img_per_s_range"] for p in points], c["name"])
        _band(
            right,
            xs,
            [p["scaling_efficiency"] for p in points],
            [p["scaling_efficiency_range"] for p in points],
            c["name"],
        )
    _throughput_and_efficiency_axes(left, right, "ranks (GPUs)")
    right.set_ylim(0, 1.05)
    nn = data["non_network"]
    fig.suptitle(
        ("calibrated" if nn["calibrated"] else "UNCALIBRATED") + ": bands span the network's fraction and "
        "latency and the non-network term",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(png)
    plotting.close(fig)


def study_figure(data: dict) -> Figure:
    """One panel per model: scaling efficiency vs nodes per network, each with its range."""
    from launch import plotting

    models = list(dict.fromkeys(r["model"] for r in data["rows"]))
    fig, axes = plotting.subplots(1, len(models), figsize=(4 * len(models), 4), dpi=100, sharey=True)
    for ax, model in zip(axes, models):
        for net in data["networks"]:
            rows = sorted(
                (r for r in data["rows"] if r["model"] == model and r["network"] == net), key=lambda r: r["nodes"]
            )
            _band(
                ax,
                [r["nodes"] for r in rows],
                [r["efficiency"] for r in rows],
                [r["efficiency_range"] for r in rows],
                net,
            )
        ax.set_title(model)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"nodes (x8 GPUs, {data['node_type']})")
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("scaling efficiency (predicted, range shaded)")
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{data['study']}: {data['question']}", fontsize="medium")
    fig.tight_layout()
    return fig


def write_study(data: dict, out: Path) -> None:
    from launch import plotting

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the study to {out}: {exc.strerror}") from None
    (out / "study.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    fig = study_figure(data)
    fig.savefig(out / "study.png")
    plotting.close(fig)
