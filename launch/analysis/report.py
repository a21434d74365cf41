"""Reports: the verdict first, then tables and plots of any set of results, as
PNGs, one self-contained HTML page (the PNGs embedded as base64, nothing
fetched) and report_data.json.

The page opens with the verdict table (launch.analysis.verdict): per group of otherwise
identical configurations, each fabric's metric relative to a reference fabric
with the ratio's 95 % CI and 'no significant difference' or 'N % slower/faster',
and a paragraph in words; the same for NCCL vs MPI and GPUDirect on vs off
where the results varied them. Then the plots (what the reference study's
figures show), one series per fabric/engine/model, each series joined to its
1-rank baseline (launch.analysis.aggregate: one aggregation, one baseline rule):
- throughput vs ranks, with the 95 % CI as error bars and the ideal-scaling line;
- scaling efficiency, throughput(N) / (N x throughput(1)), with the ideal at 1;
- the verdict ratios with their CIs;
- communication share vs ranks (multi-rank points only);
- each size-sweep kind's bus bandwidth vs message size (allreduce, alltoall), with each link rate drawn;
- predicted (alpha-beta model, launch.predict.model) vs measured step time, where the
  model ran: fitted on an allreduce run of the same fabric.
Then the points (repetitions aggregated) and every run.
report_data.json holds the verdicts, the points and every drawn series as read
back from the figures, so what a test (or a reader) checks is exactly what was
shown. Fields a result lacks leave its points out; they never fail the report.
"""

from __future__ import annotations

import base64
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from launch import plotting
from launch.shapes import terminal
from launch.errors import UsageError
from launch.kinds import kind_of, trains
from launch.kinds.kind import Kind
from launch.fleet.locate import heatmap_figure
from launch.analysis import aggregate, verdict
from launch.predict import model
from launch.analysis.plots import (
    cut_off_text,
    figure_data,
    plot_busbw,
    plot_comm_share,  # noqa: F401
    plot_efficiency,
    plot_predicted,
    plot_throughput,
    plot_verdicts,
)
from launch.analysis.report_html import render_html
from launch.analysis import across_sites
from launch.analysis.across_sites_plot import plot_group
from launch.analysis.report_tables import health_table, points_table, runs_table  # noqa: F401
from launch.results.result import Result, as_result, malformed, read_tree, typed
from launch.provenance.stacks import report_lines as stack_report


def load_results(dirs: list[Path], required: bool = True) -> list[Result]:
    """Every result under dirs; each file that is not one, or whose fields are malformed, is
    named on stderr in one line and left out. `required`: none at all is an error."""
    found, problems = read_tree(dirs)
    results = []
    for result in found:
        why = malformed(result)
        if why:
            problems.append(f"{result.path or result.run_id}: malformed: {why}")
        else:
            results.append(result)
    for problem in problems:
        print(f"fabric-bench: warning: left out of the report: {terminal(problem)}", file=sys.stderr)
    if not results and required:
        raise UsageError(f"no result.json under {', '.join(map(str, dirs))}")
    return results


_number = aggregate.number
series_name = aggregate.series_name


def training_points(results: list[Result]) -> dict[str, dict[int, dict]]:
    """series -> ranks -> the aggregated point (launch.analysis.aggregate), its 1-rank baseline joined."""
    return {
        name: {p.ranks: _point_dict(p) for p in points}
        for name, points in aggregate.curves(aggregate.aggregate(results)).items()
    }


def _point_dict(p: aggregate.Point) -> dict:
    return {
        "img_per_s": p.mean,
        "ci95": p.ci95,
        "comm_fraction": p.comm_fraction,
        "scaling_efficiency": p.efficiency,
        "runs": [r.run_id for r in p.runs],
    }


def sweep_results(results: Sequence[Result]) -> dict[Kind, list[Result]]:
    """The ok results with per-size rows, by the kind that draws them (launch.kinds: `sizes_plot`)."""
    out: dict[Kind, list[Result]] = {}
    for r in results:
        kind = kind_of(r)
        if (
            kind is not None
            and kind.sizes_plot
            and (as_result(r).status or "ok") == "ok"
            and (fields := typed(r)) is not None
            and kind.curve(fields)  # rows to draw, as the kind draws them
        ):
            out.setdefault(kind, []).append(r)
    return out


def allreduce_results(results: Sequence[Result]) -> list[Result]:
    """The results whose rows fit the ring allreduce alpha-beta model (launch.predict.model)."""
    return [r for kind, found in sweep_results(results).items() if kind.fits_alpha_beta for r in found]


def located_clusters(dirs: list[Path]) -> list[dict]:
    """Every locate.json under `dirs` (launch.fleet.locate), validated; one that is not is one line on
    stderr and left out, as a malformed result is."""
    from launch.fleet.locate import read_locate

    found = []
    for path in sorted(
        {p for d in dirs for p in ([d] if d.is_file() else Path(d).rglob("locate.json")) if p.name == "locate.json"}
    ):
        try:
            found.append({"dir": str(path.parent), **read_locate(path)})
        except UsageError as exc:
            print(f"fabric-bench: skipped: {terminal(exc)}", file=sys.stderr)
    return found


def fitted_models(results: Sequence[Result]) -> dict:
    """fabric -> alpha-beta model (launch.predict.model) fitted on its allreduce run with the most ranks."""
    fits: dict = {}
    for r in map(as_result, allreduce_results(results)):
        fabric, ranks = r.fabric, r.world_size or 0
        if ranks >= 2 and (fabric not in fits or ranks > fits[fabric].ranks):
            try:
                fits[fabric] = model.fit([row for row in r.sizes if _number(row.get("time_us"))], ranks)
            except (ValueError, KeyError, TypeError, ZeroDivisionError):
                continue
    return fits


def predictions(results: Sequence[Result]) -> dict[str, list[tuple[int, float, float]]]:
    """series -> [(ranks, measured step ms, predicted step ms)] wherever the model ran:
    fitted here from an allreduce run of the same fabric."""
    fits = fitted_models(results)
    out: dict[str, list] = defaultdict(list)
    for r in map(as_result, results):
        if r.status != "ok" or (r.world_size or 0) < 2 or not trains(r.benchmark):
            continue
        try:
            p = model.predict_training(fits[r.fabric], r)
            point = (r.world_size, p["measured_step_s"] * 1e3, p["predicted_step_s"] * 1e3)
        except (KeyError, UsageError):
            continue  # no model for this fabric, or figures it needs are absent
        out[series_name(r)].append(point)
    return {name: sorted(points) for name, points in sorted(out.items())}


def build(
    dirs: list[Path],
    out: Path,
    title: str = "fabric-bench report",
    baseline_fabric: str | None = None,
    study: str | None = None,
    keep_disturbed: bool = False,
    pulled: Sequence[across_sites.PulledArchive] = (),
) -> dict:
    """Write OUT/*.png, OUT/report.html and OUT/report_data.json; returns the data. With `study`
    (launch.predict.study), its predicted answer and figure follow the verdicts. Disturbed runs are
    left out of the points and verdicts unless `keep_disturbed` (launch.analysis.aggregate). Results
    of several sites (`pulled` archives' sites, else their origins' hosts) open the page with the
    section across sites (launch.analysis.across_sites): its tables first, its plots first."""
    located = located_clusters(dirs)  # a locate run alone makes a report too
    results = load_results(dirs, required=not located)
    across = across_sites.survey(results, pulled)
    points = aggregate.aggregate(results, keep_disturbed)
    curves = aggregate.curves(points)
    judged = verdict.all_verdicts(points, baseline_fabric, verdict.experiment_orders(dirs))
    figures = {}
    across_data = across.as_dict() if across.several_sites else None
    for number, group in enumerate((across_data or {}).get("groups", [])[: across_sites.MAX_PLOTTED_GROUPS]):
        figures[f"across_sites_{number}"] = plot_group(group)
    if curves:
        figures["throughput"] = plot_throughput(curves)
        if any(p.ranks == 1 for c in curves.values() for p in c):
            figures["scaling_efficiency"] = plot_efficiency(curves)
    if any(data["rows"] for data in judged.values()):
        figures["verdict_ratios"] = plot_verdicts(judged)
    if any(p.comm_fraction is not None for c in curves.values() for p in c):
        figures["comm_share"] = plot_comm_share(curves)
    for kind, swept in sweep_results(results).items():  # each size-sweep kind's bus bandwidth per size
        figures[f"{kind.name}_busbw"] = plot_busbw(swept, str(kind.sizes_plot))
    preds = predictions(results)
    if preds:
        figures["predicted_vs_measured"] = plot_predicted(preds)
    studied = None
    if study is not None:
        from launch.predict import study as studies
        from launch.predict.predict_plot import study_figure

        studied = studies.run(study)
        figures[f"study_{study}"] = study_figure(studied)
    for number, found in enumerate(located):  # pairwise bandwidth of each `fabric-bench locate` run
        figures[f"locate_heatmap{number or ''}"] = heatmap_figure(
            found["nodes"], found["grid"], found["reference_gbit_s"]
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc.strerror}") from None
    header, rows = runs_table(results, points)
    point_header, point_rows = points_table(points)
    health_header, health_rows = health_table(results)
    data: dict = {
        "schema_version": 2,
        "runs": len(results),
        "verdicts": judged,
        "points": [p.describe() for p in points],
        "ci_method": aggregate.CI_METHOD,
        "points_table": {"header": point_header, "rows": point_rows},
        "table": {"header": header, "rows": rows},
        "health_table": {"header": health_header, "rows": health_rows},
        "plots": {},
        "stacks": stack_report(results),
        "kept_disturbed": keep_disturbed,
        "across_sites": across_data,
    }
    if located:
        data["locate"] = [
            {k: found[k] for k in ("dir", "nodes", "pattern", "reference_gbit_s", "slow_nodes", "slow_links")}
            for found in located
        ]
    if studied is not None:
        data["study"] = {
            k: studied[k]
            for k in ("study", "node_type", "question", "inputs", "networks", "non_network", "answer", "rows")
        }
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
        plotting.close(fig)
    (out / "report_data.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out / "report.html").write_text(render_html(title, data, images), encoding="utf-8")
    return data
