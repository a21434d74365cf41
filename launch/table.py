"""Rich tables of training results, with scaling efficiency against 1-rank runs."""
from __future__ import annotations

from rich.table import Table

from launch.results import scaling_efficiency


def baseline_key(result: dict) -> tuple:
    spec = result["spec"]
    return (result["framework"], result["engine"], result["model"], spec["batch_size"],
            spec["image_size"], spec["precision"])


def baselines(results: list[dict]) -> dict[tuple, dict]:
    return {baseline_key(r): r for r in results if r["world_size"] == 1 and r["status"] == "ok"}


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def training_table(results: list[dict], title: str = "Training throughput") -> Table:
    table = Table(title=title)
    for column in ("framework", "engine", "model", "ranks", "img/s total", "img/s per rank",
                   "95% CI", "scaling eff.", "comm share", "params |diff|", "status"):
        table.add_column(column, justify="right" if column not in ("framework", "engine", "model", "status") else "left")
    base = baselines(results)
    for r in results:
        tp = r.get("throughput", {})
        eff = scaling_efficiency(r, base.get(baseline_key(r)))
        table.add_row(
            r["framework"], r["engine"], r["model"], str(r["world_size"]),
            fmt(tp.get("total_img_per_s"), ".1f"), fmt(tp.get("per_rank_img_per_s"), ".1f"),
            "±" + fmt(tp.get("ci95_img_per_s"), ".1f"), fmt(eff, ".2f"),
            fmt(r.get("comm_fraction"), ".0%"), fmt(r.get("params_max_abs_diff"), ".2g"),
            r["status"] if r["status"] == "ok" else f"[red]{r['status']}[/red]: {r.get('reason')}",
        )
    return table
