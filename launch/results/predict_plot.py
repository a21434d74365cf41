"""predict.json and predict.png of a prediction (launch.results.predict): the fabrics side by side."""
from __future__ import annotations

import json
from pathlib import Path

from launch.errors import UsageError


def write(data: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the prediction to {out}: {exc.strerror}") from None
    (out / "predict.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    w = data["workload"]
    for fabric in data["fabrics"]:
        points = [p for p in data["points"] if p["fabric"] == fabric["name"]]
        label = fabric["name"] + (" (nominal)" if fabric["source"].startswith("nominal") else " (fitted)")
        xs = [p["ranks"] for p in points]
        line, = left.plot(xs, [p["img_per_s"] for p in points], marker="o", label=label)
        right.plot(xs, [p["scaling_efficiency"] for p in points], marker="o", color=line.get_color(), label=label)
        right.plot(xs, [p["scaling_efficiency_no_overlap"] for p in points], linestyle="--",
                   color=line.get_color(), alpha=0.6, label="_no overlap")
    ranks = sorted({p["ranks"] for p in data["points"]})
    left.plot(ranks, [n * w["batch_size"] / w["compute_step_s"] for n in ranks], linestyle=":", color="grey",
              label="ideal scaling")
    right.axhline(1.0, linestyle=":", color="grey")
    right.plot([], [], linestyle="--", color="grey", label="no-overlap bound")
    for ax, ylabel in ((left, "throughput (img/s, total)"), (right, "scaling efficiency")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    left.set_yscale("log")
    right.set_ylim(0, 1.05)
    fig.suptitle(f"predicted: {w['engine']}, {w['gradient_bytes'] / 2**20:.1f} MiB gradients, compute step "
                 f"{w['compute_step_s'] * 1e3:.1f} ms")
    fig.tight_layout()
    fig.savefig(out / "predict.png")
    plt.close(fig)
