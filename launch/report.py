"""Reports: tables and plots of any set of results, as PNGs, one self-contained
HTML page (the PNGs embedded as base64) and report_data.json.

Plots (what the reference study's figures show), one series per
fabric/engine/model:
- throughput vs ranks, with the 95 % CI as error bars;
- scaling efficiency, throughput(N) / (N x throughput(1)), where a 1-rank run exists;
- communication share vs ranks;
- allreduce bus bandwidth vs message size, with each link rate drawn;
- predicted (alpha-beta model, launch.model) vs measured step time, where the
  model ran: fitted on an allreduce run of the same fabric, or stored in the result.
report_data.json holds every drawn series as read back from the figures, so
what a test (or a reader) checks is exactly what was plotted.
Fields a result lacks leave its points out; they never fail the report.
"""
from __future__ import annotations

import base64
import html
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.container import ErrorbarContainer  # noqa: E402

from launch.errors import UsageError  # noqa: E402


def load_results(dirs: list[Path]) -> list[dict]:
    results = []
    for directory in dirs:
        directory = Path(directory)
        files = [directory] if directory.is_file() else sorted(directory.rglob("result.json"))
        for path in files:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and "run_id" in data:
                results.append(data)
    if not results:
        raise UsageError(f"no result.json under {', '.join(map(str, dirs))}")
    return results


def fabric_label(result: dict) -> str:
    """The fabric a result ran on, as series names show it: an emulated link
    without a fabric name by its rate; '+env' when the user overrode variables."""
    spec = result.get("spec") or {}
    rate = _number(result.get("link_rate_gbit_s"))
    name = spec.get("fabric") or (f"emulated {rate:g} Gbit/s" if rate else "default")
    return name + ("+env" if spec.get("extra_env") else "")


def series_name(result: dict) -> str:
    fabric = fabric_label(result)
    what = result.get("engine") or result.get("backend") or "-"
    return f"{fabric}/{what}/{result.get('model') or result.get('benchmark')}"


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def training_points(results: list[dict]) -> dict[str, dict[int, dict]]:
    """series -> ranks -> mean throughput, CI and comm share over the ok runs at that point."""
    grouped: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        tp = r.get("throughput") or {}
        if r.get("status") == "ok" and _number(tp.get("total_img_per_s")) and r.get("world_size"):
            grouped[series_name(r)][int(r["world_size"])].append(r)
    points = {}
    for name, by_ranks in grouped.items():
        points[name] = {}
        for ranks, runs in sorted(by_ranks.items()):
            comm = [c for c in (_number(x.get("comm_fraction")) for x in runs) if c is not None]
            points[name][ranks] = {
                "img_per_s": mean(x["throughput"]["total_img_per_s"] for x in runs),
                "ci95": mean(_number(x["throughput"].get("ci95_img_per_s")) or 0.0 for x in runs),
                "comm_fraction": mean(comm) if comm else None,
                "runs": [x["run_id"] for x in runs],
            }
    return points


def _axes(title: str, xlabel: str, ylabel: str):
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _rank_ticks(ax, points: dict) -> None:
    ax.set_xticks(sorted({ranks for by_ranks in points.values() for ranks in by_ranks}))


def plot_throughput(points: dict) -> plt.Figure:
    fig, ax = _axes("Training throughput vs ranks", "ranks (GPUs on GPU runs)", "throughput (img/s, total)")
    for name, by_ranks in sorted(points.items()):
        xs = list(by_ranks)
        ax.errorbar(xs, [by_ranks[x]["img_per_s"] for x in xs], yerr=[by_ranks[x]["ci95"] for x in xs],
                    marker="o", capsize=3, label=name)
    _rank_ticks(ax, points)
    return fig


def plot_efficiency(points: dict) -> plt.Figure:
    fig, ax = _axes("Scaling efficiency vs ranks", "ranks (GPUs on GPU runs)",
                    "scaling efficiency (throughput(N) / N x throughput(1))")
    for name, by_ranks in sorted(points.items()):
        if 1 not in by_ranks:
            continue  # no 1-rank baseline in this set: no efficiency
        one = by_ranks[1]["img_per_s"]
        xs = list(by_ranks)
        ax.plot(xs, [by_ranks[x]["img_per_s"] / (x * one) for x in xs], marker="o", label=name)
    ax.axhline(1.0, color="grey", linestyle=":", label="_ideal")
    _rank_ticks(ax, points)
    return fig


def plot_comm_share(points: dict) -> plt.Figure:
    fig, ax = _axes("Communication share of a training step", "ranks (GPUs on GPU runs)",
                    "communication share (fraction of step time)")
    for name, by_ranks in sorted(points.items()):
        xs = [x for x in by_ranks if by_ranks[x]["comm_fraction"] is not None]
        if xs:
            ax.plot(xs, [by_ranks[x]["comm_fraction"] for x in xs], marker="s", label=name)
    ax.set_ylim(0, 1)
    _rank_ticks(ax, points)
    return fig


def allreduce_results(results: list[dict]) -> list[dict]:
    return [r for r in results if r.get("status", "ok") == "ok" and isinstance(r.get("sizes"), list)
            and any(_number(row.get("busbw_gbit_s")) for row in r["sizes"] if isinstance(row, dict))]


def _allreduce_label(r: dict) -> str:
    fabric = fabric_label(r)
    return f"{fabric}/{r.get('backend') or '-'} x{r.get('world_size')}"


def plot_busbw(results: list[dict]) -> plt.Figure:
    fig, ax = _axes("Allreduce bus bandwidth vs message size", "message size (bytes)", "bus bandwidth (Gbit/s)")
    for r in results:
        rows = [row for row in r["sizes"] if _number(row.get("bytes")) and _number(row.get("busbw_gbit_s"))]
        ax.plot([row["bytes"] for row in rows], [row["busbw_gbit_s"] for row in rows], marker="o",
                label=_allreduce_label(r))
    rates = sorted({_number(r.get("link_rate_gbit_s")) for r in results} - {None})
    for rate, style in zip(rates, ["--", ":", "-.", (0, (5, 1, 1, 1))] * len(rates)):
        ax.axhline(rate, linestyle=style, color="black", label=f"link rate {rate:g} Gbit/s")
    ax.set_xscale("log", base=2)
    return fig


def fitted_models(results: list[dict]) -> dict:
    """fabric -> alpha-beta model (launch.model) fitted on its allreduce run with the most ranks."""
    try:
        from launch import model
    except ImportError:  # the model module is optional
        return {}
    fits = {}
    for r in allreduce_results(results):
        fabric, ranks = (r.get("spec") or {}).get("fabric"), r.get("world_size") or 0
        if ranks >= 2 and (fabric not in fits or ranks > fits[fabric].ranks):
            try:
                fits[fabric] = model.fit([row for row in r["sizes"] if _number(row.get("time_us"))], ranks)
            except (ValueError, KeyError, TypeError, ZeroDivisionError):
                continue
    return fits


def predictions(results: list[dict]) -> dict[str, list[tuple[int, float, float]]]:
    """series -> [(ranks, measured step ms, predicted step ms)] wherever the model ran:
    fitted here from an allreduce run of the same fabric, or stored with the result."""
    try:
        from launch import model
    except ImportError:  # stored predictions only
        model = None
    fits = fitted_models(results)
    out: dict[str, list] = defaultdict(list)
    for r in results:
        if r.get("status") != "ok" or (r.get("world_size") or 0) < 2 or r.get("benchmark") != "train":
            continue
        stored = r.get("alpha_beta") or r.get("prediction")
        fabric = (r.get("spec") or {}).get("fabric")
        try:
            p = stored if isinstance(stored, dict) else model.predict_training(fits[fabric], r)  # type: ignore
            point = (r["world_size"], p["measured_step_s"] * 1e3, p["predicted_step_s"] * 1e3)
        except (KeyError, TypeError, ZeroDivisionError, AttributeError):
            continue  # no model for this fabric, or fields it needs are absent
        out[series_name(r)].append(point)
    return {name: sorted(points) for name, points in sorted(out.items())}


def plot_predicted(preds: dict) -> plt.Figure:
    fig, ax = _axes("Alpha-beta model: predicted vs measured step time", "ranks (GPUs on GPU runs)",
                    "step time (ms)")
    for name, points in preds.items():
        xs = [x for x, _, _ in points]
        line, = ax.plot(xs, [m for _, m, _ in points], marker="o", label=f"measured {name}")
        ax.plot(xs, [p for _, _, p in points], marker="x", linestyle="--", color=line.get_color(),
                label=f"predicted {name}")
    ax.set_xticks(sorted({x for points in preds.values() for x, _, _ in points}))
    return fig


def figure_data(fig: plt.Figure) -> dict:
    """What a figure shows, read back from matplotlib: title, axis labels and every labelled line."""
    ax = fig.axes[0]
    # an errorbar's label sits on its container; its data line is the container's first
    named = [(c.get_label(), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
    named += [(line.get_label(), line) for line in ax.get_lines()]
    series = []
    for label, line in named:
        if label.startswith("_"):
            continue
        xs, ys = line.get_data()
        series.append({"name": label, "x": [float(v) for v in xs], "y": [float(v) for v in ys]})
    return {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "series": series}


def _cell(value, fmt: str = ".1f") -> str:
    return "-" if value is None else (format(value, fmt) if isinstance(value, float) else str(value))


def runs_table(results: list[dict], points: dict) -> tuple[list[str], list[list[str]]]:
    header = ["run", "fabric", "engine", "model", "ranks", "img/s total", "95% CI", "scaling eff.",
              "comm share", "transport", "status"]
    rows = []
    for r in sorted(results, key=lambda x: (series_name(x), x.get("world_size") or 0, x.get("run_id"))):
        tp = r.get("throughput") or {}
        by_ranks = points.get(series_name(r), {})
        eff = None
        if r.get("status") == "ok" and 1 in by_ranks and _number(tp.get("total_img_per_s")):
            eff = tp["total_img_per_s"] / (r["world_size"] * by_ranks[1]["img_per_s"])
        rows.append([r.get("run_id", "-"), fabric_label(r),
                     r.get("engine") or r.get("backend") or "-", r.get("model") or r.get("benchmark") or "-",
                     _cell(r.get("world_size")), _cell(_number(tp.get("total_img_per_s"))),
                     _cell(_number(tp.get("ci95_img_per_s"))), _cell(eff, ".2f"),
                     _cell(_number(r.get("comm_fraction")), ".0%"), (r.get("transport") or {}).get("verdict", "-"),
                     r.get("status", "-") + (f": {r['reason']}" if r.get("reason") else "")])
    return header, rows


def build(dirs: list[Path], out: Path, title: str = "fabric-bench report") -> dict:
    """Write OUT/*.png, OUT/report.html and OUT/report_data.json; returns the data."""
    results = load_results(dirs)
    points = training_points(results)
    figures = {}
    if points:
        figures["throughput"] = plot_throughput(points)
        if any(1 in p for p in points.values()):
            figures["scaling_efficiency"] = plot_efficiency(points)
        if any(v["comm_fraction"] is not None for p in points.values() for v in p.values()):
            figures["comm_share"] = plot_comm_share(points)
    allreduce = allreduce_results(results)
    if allreduce:
        figures["allreduce_busbw"] = plot_busbw(allreduce)
    preds = predictions(results)
    if preds:
        figures["predicted_vs_measured"] = plot_predicted(preds)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc.strerror}") from None
    header, rows = runs_table(results, points)
    data = {"schema_version": 1, "runs": len(results), "table": {"header": header, "rows": rows}, "plots": {}}
    images = {}
    for name, fig in figures.items():
        for ax in fig.axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
        fig.tight_layout()
        png = out / f"{name}.png"
        fig.savefig(png)
        data["plots"][name] = {**figure_data(fig), "png": png.name}
        images[name] = base64.b64encode(png.read_bytes()).decode("ascii")
        plt.close(fig)
    (out / "report_data.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(render_html(title, data, images), encoding="utf-8")
    return data


def render_html(title: str, data: dict, images: dict[str, str]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in data["table"]["header"])
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in data["table"]["rows"])
    plots = "".join(
        f'<figure><img alt="{esc(p["title"])}" src="data:image/png;base64,{images[name]}">'
        f"<figcaption>{esc(p['title'])}: {esc(', '.join(s['name'] for s in p['series']))}</figcaption></figure>"
        for name, p in data["plots"].items())
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:90%}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}figure{{display:inline-block;margin:1em}}</style>
</head><body><h1>{esc(title)}</h1><p>{data['runs']} runs</p>
<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{plots}
</body></html>
"""
