"""Reports: the verdict first, then tables and plots of any set of results, as
PNGs, one self-contained HTML page (the PNGs embedded as base64, nothing
fetched) and report_data.json.

The page opens with the verdict table (launch.results.verdict): per group of otherwise
identical configurations, each fabric's metric relative to a reference fabric
with the ratio's 95 % CI and 'no significant difference' or 'N % slower/faster',
and a paragraph in words; the same for NCCL vs MPI and GPUDirect on vs off
where the results varied them. Then the plots (what the reference study's
figures show), one series per fabric/engine/model, each series joined to its
1-rank baseline (launch.results.aggregate: one aggregation, one baseline rule):
- throughput vs ranks, with the 95 % CI as error bars and the ideal-scaling line;
- scaling efficiency, throughput(N) / (N x throughput(1)), with the ideal at 1;
- the verdict ratios with their CIs;
- communication share vs ranks (multi-rank points only);
- allreduce bus bandwidth vs message size, with each link rate drawn;
- predicted (alpha-beta model, launch.results.model) vs measured step time, where the
  model ran: fitted on an allreduce run of the same fabric.
Then the points (repetitions aggregated) and every run.
report_data.json holds the verdicts, the points and every drawn series as read
back from the figures, so what a test (or a reader) checks is exactly what was
shown. Fields a result lacks leave its points out; they never fail the report.
"""
from __future__ import annotations

import base64
import html
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False  # names from other sites are text: "$x$" is not math
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.container import ErrorbarContainer  # noqa: E402

from launch.results import aggregate, model, verdict  # noqa: E402
from launch.errors import UsageError  # noqa: E402
from launch.results.result import Result, malformed, read_tree  # noqa: E402
from launch.stacks import report_lines as stack_report  # noqa: E402


def load_results(dirs: list[Path]) -> list[Result]:
    """Every result under dirs; each file that is not one, or whose fields are malformed, is
    named on stderr in one line and left out."""
    found, problems = read_tree(dirs)
    results = []
    for result in found:
        why = malformed(result)
        if why:
            problems.append(f"{result.path or result.run_id}: malformed: {why}")
        else:
            results.append(result)
    for problem in problems:
        print(f"fabric-bench: warning: left out of the report: {problem}", file=sys.stderr)
    if not results:
        raise UsageError(f"no result.json under {', '.join(map(str, dirs))}")
    return results


_number = aggregate.number
fabric_label = aggregate.fabric_label
series_name = aggregate.series_name


def training_points(results: list[dict]) -> dict[str, dict[int, dict]]:
    """series -> ranks -> the aggregated point (launch.results.aggregate), its 1-rank baseline joined."""
    return {name: {p.ranks: _point_dict(p) for p in points}
            for name, points in aggregate.curves(aggregate.aggregate(results)).items()}


def _point_dict(p: aggregate.Point) -> dict:
    return {"img_per_s": p.mean, "ci95": p.ci95, "comm_fraction": p.comm_fraction,
            "scaling_efficiency": p.efficiency, "runs": [r["run_id"] for r in p.runs]}


def _axes(title: str, xlabel: str, ylabel: str, size=(7, 4.5)):
    fig, ax = plt.subplots(figsize=size, dpi=100)
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


def plot_throughput(curves: dict[str, list[aggregate.Point]]) -> plt.Figure:
    fig, ax = _axes("Training throughput vs ranks", "ranks (GPUs on GPU runs)", "throughput (img/s, total)")
    ideal_drawn = False
    for name, points in curves.items():
        xs = [p.ranks for p in points]
        bars = ax.errorbar(xs, [p.mean for p in points], yerr=[_ci(p.ci95) for p in points],
                           marker="o", capsize=3, label=name)
        one = next((p for p in points if p.ranks == 1), None)
        if one is not None and len(xs) > 1:
            # hidden from the series list (its own entry in the legend): N x the 1-rank throughput
            line, = ax.plot(xs, [x * one.mean for x in xs], linestyle=":", color=bars.lines[0].get_color(),
                            alpha=0.8, label=f"_ideal {name}")
            line.set_gid("ideal")
            ideal_drawn = True
    if ideal_drawn:
        proxy, = ax.plot([], [], linestyle=":", color="grey", label=IDEAL_LABEL)
        proxy.set_gid("legend-only")
    _rank_ticks(ax, curves)
    return fig


def plot_efficiency(curves: dict[str, list[aggregate.Point]]) -> plt.Figure:
    fig, ax = _axes("Scaling efficiency vs ranks", "ranks (GPUs on GPU runs)",
                    "scaling efficiency (throughput(N) / N x throughput(1))")
    for name, points in curves.items():
        if not any(p.ranks == 1 for p in points):
            continue  # no 1-rank baseline in this set: no efficiency
        ax.plot([p.ranks for p in points], [p.efficiency for p in points], marker="o", label=name)
    ax.axhline(1.0, color="grey", linestyle=":", label="_ideal")
    proxy, = ax.plot([], [], linestyle=":", color="grey", label="ideal (1.0)")
    proxy.set_gid("legend-only")
    _rank_ticks(ax, curves)
    return fig


def plot_comm_share(curves: dict[str, list[aggregate.Point]]) -> plt.Figure:
    fig, ax = _axes("Communication share of a training step", "ranks (GPUs on GPU runs)",
                    "communication share (fraction of step time)")
    for name, points in curves.items():
        shown = [p for p in points if p.comm_fraction is not None]  # never a 1-rank point
        if shown:
            ax.plot([p.ranks for p in shown], [p.comm_fraction for p in shown], marker="s", label=name)
    ax.set_ylim(0, 1)
    _rank_ticks(ax, curves)
    return fig


def _group_label(row: dict) -> str:
    knobs = [f"{k} {row[k]}" for k in ("allreduce", "gpudirect", "fabric") if k in row and row[k] != "default"
             and k != row["axis"]]
    return (f"{row['model']} {row['engine']} {row['nodes']}x{row['ranks_per_node']}"
            + (f" {' '.join(knobs)}" if knobs else ""))


def plot_verdicts(all_verdicts: dict) -> plt.Figure:
    """Every verdict row: the speed ratio (throughput ratio, inverse time ratio) with its 95 % CI."""
    rows = [r for data in all_verdicts.values() for r in data["rows"]]
    fig, ax = _axes("Verdicts: relative speed with 95 % CI", "speed relative to the reference\n"
                    "(throughput or bandwidth ratio; inverse time ratio for the halo proxy)", "",
                    size=(8, max(3.0, 1.2 + 0.32 * len(rows))))
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
    """fabric -> alpha-beta model (launch.results.model) fitted on its allreduce run with the most ranks."""
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
    fitted here from an allreduce run of the same fabric."""
    fits = fitted_models(results)
    out: dict[str, list] = defaultdict(list)
    for r in results:
        if r.get("status") != "ok" or (r.get("world_size") or 0) < 2 or r.get("benchmark") != "train":
            continue
        fabric = (r.get("spec") or {}).get("fabric")
        try:
            p = model.predict_training(fits[fabric], r)
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
    """What a figure shows, read back from matplotlib: title, axis labels, every labelled line
    (`series`) and the ideal-scaling lines drawn beside them (`ideal`)."""
    ax = fig.axes[0]
    # an errorbar's label sits on its container; its data line is the container's first
    named = [(c.get_label(), c.lines[0]) for c in ax.containers if isinstance(c, ErrorbarContainer)]
    named += [(line.get_label(), line) for line in ax.get_lines()]
    series, ideal = [], []
    for label, line in named:
        xs, ys = line.get_data()
        entry = {"name": label, "x": [float(v) for v in xs], "y": [float(v) for v in ys]}
        if line.get_gid() == "ideal":
            ideal.append({**entry, "name": label.removeprefix("_ideal ")})
        elif not label.startswith("_") and line.get_gid() != "legend-only":
            series.append(entry)
    data = {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "series": series}
    if ideal:
        data["ideal"] = ideal
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    if ticks and not ax.get_ylabel():
        data["yticklabels"] = ticks
    return data


def cut_off_text(fig: plt.Figure) -> list[str]:
    """What of the figure is drawn past its edges: each axes (its labels, ticks, title, legend)
    whose drawn extent leaves the image, named by its title."""
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    out = []
    for ax in fig.axes:
        box = ax.get_tightbbox(renderer)
        if box is not None and (box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1):
            out.append(f"{ax.get_title() or 'axes'}: drawn over [{box.x0:.0f}, {box.x1:.0f}] x [{box.y0:.0f}, "
                       f"{box.y1:.0f}] px of {width} x {height}")
    return out


def _cell(value, fmt: str = ".1f") -> str:
    return "-" if value is None else (format(value, fmt) if isinstance(value, float) else str(value))


def runs_table(results: list[dict], points: list[aggregate.Point]) -> tuple[list[str], list[list[str]]]:
    """Every run (repetitions kept), efficiency against the aggregated baseline of its series; where
    the ranks shared one host's cores, also against the same cores (total at N / total at 1)."""
    header = ["run", "fabric", "engine", "model", "ranks", "img/s total", "95% CI", "scaling eff.",
              "comm share", "transport", "status"]
    rows = []
    for r in sorted(results, key=lambda x: (series_name(x), x.get("world_size") or 0, x.get("run_id"))):
        tp = r.get("throughput") or {}
        point = aggregate.point_of(points, r)
        eff = point.run_efficiency(r) if point is not None else None
        same = point.same_cores_efficiency(r) if point is not None else None
        comm = _number(r.get("comm_fraction")) if (r.get("world_size") or 0) > 1 else None
        rows.append([r.get("run_id", "-"), fabric_label(r),
                     r.get("engine") or r.get("backend") or "-", r.get("model") or r.get("benchmark") or "-",
                     _cell(r.get("world_size")), _cell(_number(tp.get("total_img_per_s"))),
                     _cell(_number(tp.get("ci95_img_per_s"))),
                     "1 (baseline)" if eff == 1.0 and (r.get("world_size") == 1) else _cell(eff, ".2f")
                     + (f" (shared cores: {same:.2f} of the 1-rank total)" if same is not None else ""),
                     _cell(comm, ".0%"), (r.get("transport") or {}).get("verdict", "-"),
                     r.get("status", "-") + (f": {r['reason']}" if r.get("reason") else "")])
    return header, rows


def health_table(results: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per run, the fabric-truth verdicts beside the numbers: is the figure plausible for the
    link, did the host and image fit, where the ranks sat, who lagged, who hung."""
    header = ["run", "plausibility (busbw / line rate)", "preflight", "placement", "stragglers", "stall / stop"]
    rows = []
    for r in sorted(results, key=lambda x: x.get("run_id") or ""):
        plaus = r.get("plausibility") or {}
        ratio = plaus.get("ratio")
        placement = r.get("placement") or {}
        problems = "; ".join(f"rank {p.get('rank')}: {p.get('problem')}" for p in placement.get("problems") or [])
        slow = (r.get("stragglers") or {}).get("ranks") or []
        stall = r.get("stall") or {}
        stopped = (f"hanging: rank {', '.join(map(str, stall['hanging_ranks']))}" if stall.get("hanging_ranks")
                   else "stalled, culprit unknown" if stall else
                   f"interrupted by {r['interruption']['signal']}" if r.get("interruption") else "-")
        rows.append([r.get("run_id", "-"),
                     (plaus.get("verdict") or "-") + (f" ({ratio:.2f})" if isinstance(ratio, float) else ""),
                     (r.get("preflight") or {}).get("verdict", "-"),
                     (placement.get("verdict") or "-") + (f": {problems}" if problems else ""),
                     ", ".join(f"rank {x['rank']} +{x['excess']:.0%}" for x in slow) or "-", stopped])
    return header, rows


def points_table(points: list[aggregate.Point]) -> tuple[list[str], list[list[str]]]:
    """One row per point: repetitions aggregated (mean, CI across repetitions and iterations)."""
    header = ["series", "ranks", "metric", "mean", "95% CI", "repetitions", "samples", "scaling eff.",
              "comm share", "1-rank baseline"]
    rows = []
    for p in sorted(points, key=lambda p: (p.benchmark, p.series, p.ranks)):
        fmt = ".4g" if p.metric.unit == "s" else ".1f"
        rows.append([p.series, str(p.ranks), f"{p.metric.label} ({p.metric.unit})", format(p.mean, fmt),
                     "-" if p.ci95 is None else "±" + format(p.ci95, fmt), str(p.repetitions), str(p.n_samples),
                     _cell(p.efficiency, ".2f"), _cell(p.comm_fraction, ".0%"),
                     "itself" if p.ranks == 1 else (p.baseline.series if p.baseline else "-")])
    return header, rows


def build(dirs: list[Path], out: Path, title: str = "fabric-bench report", baseline_fabric: str | None = None) -> dict:
    """Write OUT/*.png, OUT/report.html and OUT/report_data.json; returns the data."""
    results = load_results(dirs)
    points = aggregate.aggregate(results)
    curves = aggregate.curves(points)
    judged = verdict.all_verdicts(points, baseline_fabric, verdict.experiment_orders(dirs))
    figures = {}
    if curves:
        figures["throughput"] = plot_throughput(curves)
        if any(p.ranks == 1 for c in curves.values() for p in c):
            figures["scaling_efficiency"] = plot_efficiency(curves)
    if any(data["rows"] for data in judged.values()):
        figures["verdict_ratios"] = plot_verdicts(judged)
    if any(p.comm_fraction is not None for c in curves.values() for p in c):
        figures["comm_share"] = plot_comm_share(curves)
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
    point_header, point_rows = points_table(points)
    health_header, health_rows = health_table(results)
    data = {"schema_version": 2, "runs": len(results), "verdicts": judged,
            "points": [p.describe() for p in points], "ci_method": aggregate.CI_METHOD,
            "points_table": {"header": point_header, "rows": point_rows},
            "table": {"header": header, "rows": rows},
            "health_table": {"header": health_header, "rows": health_rows}, "plots": {},
            "stacks": stack_report(results)}
    images = {}
    for name, fig in figures.items():
        for ax in fig.axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
        fig.tight_layout()
        png = out / f"{name}.png"
        fig.savefig(png)
        data["plots"][name] = {**figure_data(fig), "png": png.name, "cut_off_text": cut_off_text(fig)}
        images[name] = base64.b64encode(png.read_bytes()).decode("ascii")
        plt.close(fig)
    (out / "report_data.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(render_html(title, data, images), encoding="utf-8")
    return data


def _html_table(header: list[str], rows: list[list[str]], css: str = "") -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_verdicts(judged: dict) -> str:
    esc = html.escape
    parts = []
    for axis, data in judged.items():
        heading = {"fabric": "Does the fabric change performance?",
                   "allreduce": "Does NCCL vs MPI change performance?",
                   "gpudirect": "Does GPUDirect change performance?"}[axis]
        parts.append(f'<section class="verdict" id="verdict-{esc(axis)}"><h2>{esc(heading)}</h2>')
        if data["rows"]:
            header, rows = verdict.table_rows(data)
            parts.append(_html_table(header, rows, "verdicts"))
            parts.append(f'<p class="method">Reference {esc(data["title"])}: {esc(str(data["reference"]))}. '
                         f'Method: {esc(data["method"])}.</p>')
        parts.append(f'<p class="answer">{esc(data["paragraph"])}</p></section>')
    return "".join(parts)


def render_html(title: str, data: dict, images: dict[str, str]) -> str:
    esc = html.escape
    plots = "".join(
        f'<figure id="plot-{esc(name)}"><img alt="{esc(p["title"])}" src="data:image/png;base64,{images[name]}">'
        f"<figcaption>{esc(p['title'])}: {esc(', '.join(s['name'] for s in p['series']))}</figcaption></figure>"
        for name, p in data["plots"].items())
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:90%}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}figure{{display:inline-block;margin:1em;max-width:100%}}
figure img{{max-width:100%;height:auto}}p.answer{{font-size:110%;max-width:60em}}.scroll{{overflow-x:auto}}</style>
</head><body><h1>{esc(title)}</h1><p>{data['runs']} runs</p>
<p class="stacks">{"<br>".join(esc(line) for line in data.get("stacks", []))}</p>
{render_verdicts(data['verdicts'])}
<h2>Plots</h2>
{plots}
<h2>Points (repetitions aggregated)</h2>
<p class="method">{esc(data['ci_method'])}.</p>
<div class="scroll">{_html_table(data['points_table']['header'], data['points_table']['rows'], 'points')}</div>
<h2>Runs</h2>
<div class="scroll">{_html_table(data['table']['header'], data['table']['rows'], 'runs')}</div>
<h2>Run health: plausibility, preflight, placement, stragglers, stalls</h2>
<div class="scroll">{_html_table(data['health_table']['header'], data['health_table']['rows'], 'health')}</div>
</body></html>
"""
