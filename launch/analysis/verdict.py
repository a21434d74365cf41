"""Verdicts: does the fabric (or NCCL vs MPI, or GPUDirect on vs off) change the
figure of merit significantly? The reference study's question, answered per
group of otherwise identical configurations.

For each group (benchmark and model, nodes, ranks per node, engine, and the
other knobs), each value of the compared knob is set against a reference value
(the first in the experiment, or the one asked for): the ratio of the metric
(throughput for training, time per iteration for the halo proxy, bus bandwidth
for allreduce) with its 95 % CI, by Welch's t on log(metric) (METHOD), and a
verdict: 'no significant difference' where the CI of the ratio holds 1, else
'N % slower' or 'N % faster' (slower: less throughput or bandwidth, more time
per iteration). One-rank points are left out: one rank uses no fabric.

Disturbed runs (launch.disturbance: an outside cause measured) are left out of the points by
the aggregation unless kept on request; each row names how many were left out and why, and
where a side has only disturbed runs the row's verdict is 'cannot tell' (never a difference).
Unsteady runs (their own steps varied) stay in: their spread widens the CI, and each row and
the paragraph say how many there were.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

from launch.analysis.aggregate import CI_METHOD, COMM_KNOBS, Point, spec_of, subject_of, what_of
from containers.untrusted import read_json
from launch.errors import UsageError
from launch.figures import value_text
from launch.ranks.runspec import RunSpec
from launch.results.result import as_result

METHOD = (
    "ratio of geometric means; 95 % CI by Welch's t on log(metric) (Welch-Satterthwaite degrees "
    "of freedom); each side's variance: " + CI_METHOD.split(": ", 1)[1]
)
WITHIN = 0.02  # 'within ±2 %' in the words
MAX_SUMMARY_BYTES = 64 << 20


def knob_value(knob: str) -> Callable[[Point], str]:
    """A point's value of a communication knob ("default": not set)."""
    return lambda point: getattr(spec_of(point.first), knob) or "default"


AXES: dict[str, tuple[str, Callable[[Point], str]]] = {  # axis -> (what a reader calls it, a point's value)
    "fabric": ("fabric", lambda p: p.fabric),
    **{knob: (title, knob_value(knob)) for knob, (_, title) in COMM_KNOBS.items()},
}
WORKLOAD = RunSpec.fields_where("workload")


def group_of(point: Point, axis: str) -> dict:
    spec = spec_of(point.first)
    group = {
        "benchmark": point.benchmark,
        "model": subject_of(point.first),
        "nodes": point.nodes,
        "ranks_per_node": point.ranks // point.nodes,
        "engine": what_of(point.first),
        **{knob: AXES[knob][1](point) for knob in COMM_KNOBS},
        "fabric": point.fabric,
    }
    del group[axis]
    # the rest of what defines the measured work (each kind's workload fields, launch.ranks.runspec)
    # (a kind's own option, the halo proxy's grid, is an extra of the typed spec: read by its name)
    hidden = (*(getattr(spec, name, None) for name in WORKLOAD), spec.gpus_per_node)
    return {**group, "_hidden": hidden}


def compare(reference: Point, other: Point) -> dict:
    """Ratio other/reference of the metric, its 95 % CI (METHOD) and the verdict."""
    from scipy import stats as scipy_stats  # at use: the CLI starts without scipy

    a, b = reference.log_estimate, other.log_estimate
    ratio = math.exp(b.mean - a.mean)
    low = high = None
    if a.variance is not None and b.variance is not None and a.df and b.df:
        var = a.variance + b.variance
        if var > 0:
            df = var**2 / (a.variance**2 / a.df + b.variance**2 / b.df)
            half = float(scipy_stats.t.ppf(0.975, df)) * math.sqrt(var)
        else:
            half = 0.0
        low, high = math.exp(b.mean - a.mean - half), math.exp(b.mean - a.mean + half)
    better = reference.metric.higher_is_better
    speed = ratio if better else 1 / ratio  # > 1: the other value is faster
    significant = low is not None and high is not None and (low > 1 or high < 1)
    if low is None:
        verdict = "no CI (one sample per side)"
    elif not significant:
        verdict = "no significant difference"
    else:
        verdict = f"{abs(speed - 1) * 100:.1f} % {'faster' if speed > 1 else 'slower'}"
    return {
        "ratio": ratio,
        "ci95": [low, high] if low is not None else None,
        "speed_ratio": speed,
        "speed_ci95": (None if low is None or high is None else [low, high] if better else [1 / high, 1 / low]),
        "significant": significant,
        "verdict": verdict,
    }


def cannot_tell(reference: Point, other: Point) -> str | None:
    """Why a comparison of these two points cannot be read (a side with only disturbed runs)."""
    sides = [(name, p) for name, p in (("reference", reference), ("compared", other)) if p.disturbed]
    if not sides:
        return None
    return "cannot tell: " + "; ".join(f"every {name} run was disturbed ({p.unreadable_because})" for name, p in sides)


def _ordered(values, order: list[str]) -> list[str]:
    def rank(value):
        for i, name in enumerate(order):
            if value == name or value.startswith(name + "+"):
                return (i, value)
        return (len(order), value)

    return sorted(values, key=rank)


def verdicts(
    points: list[Point], axis: str = "fabric", reference: str | None = None, order: list[str] | None = None
) -> dict:
    """The verdict table of one axis: rows per group and compared value, and a paragraph in words."""
    title, value_of = AXES[axis]
    groups: dict[str, dict] = {}
    for point in points:
        if point.ranks < 2:
            continue
        group = group_of(point, axis)
        key = json.dumps(group, sort_keys=True, default=str)
        groups.setdefault(key, {"group": group, "points": {}})["points"].setdefault(value_of(point), point)
    values_seen = sorted({v for g in groups.values() for v in g["points"]})
    order = list(order or [])
    if reference is not None:
        if reference not in values_seen:
            raise UsageError(
                f"--baseline-{axis} {reference}: no multi-rank results on it; "
                f"{title} values found: {', '.join(values_seen) or 'none'}"
            )
        order = [reference] + [v for v in order if v != reference]
    chosen = _ordered(values_seen, order)[0] if values_seen else None
    rows = []
    for entry in sorted(groups.values(), key=lambda g: json.dumps(g["group"], sort_keys=True, default=str)):
        present = _ordered(entry["points"], order)
        if len(present) < 2:
            continue
        ref_value = chosen if chosen in entry["points"] else present[0]
        ref = entry["points"][ref_value]
        for value in present:
            if value == ref_value:
                continue
            other = entry["points"][value]
            group = {k: v for k, v in entry["group"].items() if k != "_hidden"}
            rows.append(
                {
                    **group,
                    "axis": axis,
                    "reference": ref_value,
                    "value": value,
                    "metric": ref.metric.name,
                    "metric_label": ref.metric.label,
                    "unit": ref.metric.unit,
                    "reference_mean": ref.mean,
                    "mean": other.mean,
                    "reference_repetitions": ref.repetitions,
                    "repetitions": other.repetitions,
                    "reference_samples": ref.n_samples,
                    "samples": other.n_samples,
                    "reference_runs": [as_result(r).run_id for r in ref.runs],
                    "runs": [as_result(r).run_id for r in other.runs],
                    "left_out": ref.left_out + other.left_out,
                    "reference_unsteady": ref.unsteady,
                    "unsteady": other.unsteady,
                    **compare(ref, other),
                }
            )
            if (why := cannot_tell(ref, other)) is not None:
                rows[-1].update(verdict=why, significant=False, cannot_tell=True)
    data = {
        "axis": axis,
        "title": title,
        "reference": chosen,
        "method": METHOD,
        "within": WITHIN,
        "values": _ordered(values_seen, order),
        "rows": rows,
        "nothing_to_compare": None,
    }
    if not rows:
        data["nothing_to_compare"] = (
            f"nothing to compare: no group of multi-rank results ran with two {title} values"
            + (f" (only {', '.join(values_seen)})" if values_seen else " (no multi-rank results)")
        )
    data["paragraph"] = paragraph(data)
    return data


def _where(row: dict) -> str:
    return f"{row['model']} at {row['nodes']} node{'s' if row['nodes'] != 1 else ''}, {row['engine']}"


def _share(count: int, total: int) -> str:
    """'both', 'all 3', '1 of 3': how many of the groups, as a sentence says it."""
    if count == total:
        return "both" if total == 2 else f"all {total}"
    return f"{count} of {total}"


def _sentence_of(value: str, refs: str, rows: list[dict], within: float) -> str:
    """What the rows of one compared value say, in words that fit zero, one or many groups."""
    total = len(rows)
    slower = [r for r in rows if r["significant"] and r["speed_ratio"] < 1]
    faster = [r for r in rows if r["significant"] and r["speed_ratio"] > 1]
    unclear = [r for r in rows if not r["significant"] and r["ci95"] is not None]
    no_ci = [r for r in rows if r["ci95"] is None]
    close = [r for r in rows if abs(r["speed_ratio"] - 1) <= within]
    band = f"±{within * 100:.0f} %"

    def by(picked: list[dict]) -> str:
        worst = max(picked, key=lambda r: abs(r["speed_ratio"] - 1))
        size = f"{abs(worst['speed_ratio'] - 1) * 100:.1f} %"
        return f"by {size}, {_where(worst)}" if len(picked) == 1 else f"by up to {size}, {_where(worst)}"

    if total == 1:
        (row,) = rows
        if slower or faster:
            what = f"significantly {'slower' if slower else 'faster'} than {refs} ({by(rows)})"
        elif no_ci:
            what = f"{row['speed_ratio']:.3f} x {refs} with no CI (one sample per side)"
        else:
            what = f"not significantly different from {refs} (the ratio's 95 % CI holds 1)"
        closeness = f"within {band} of it" if close else f"not within {band} of it"
        return f"In the one group where both ran, {value} is {what}, {closeness}"
    found = [
        (picked, words, link, detail)
        for picked, words, link, detail in (
            (faster, "significantly faster", "than", faster and by(faster)),
            (slower, "significantly slower", "than", slower and by(slower)),
            (unclear, "not significantly different", "from", "the ratio's 95 % CI holds 1"),
            (no_ci, "without a CI", "against", "one sample per side"),
        )
        if picked
    ]
    parts = [
        f"{words}{f' {link} {refs}' if k == 0 else ''} in {_share(len(picked), total)} ({detail})"
        for k, (picked, words, link, detail) in enumerate(found)
    ]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    closeness = f"within {band} of it in {_share(len(close), total) if close else 'none'}"
    return f"In the {total} groups where both ran, {value} is {listed}; {closeness}"


def paragraph(data: dict) -> str:
    """The table's answer in words."""
    if data["nothing_to_compare"]:
        return data["nothing_to_compare"].capitalize() + "."
    sentences = []
    left_out = [x for r in data["rows"] for x in r.get("left_out", [])]
    unknown = [r for r in data["rows"] if r.get("cannot_tell")]
    if left_out:
        causes = sorted({c.split(" during")[0] for x in left_out for c in x.get("causes", [])})
        sentences.append(
            f"{len(left_out)} disturbed run{'s were' if len(left_out) != 1 else ' was'} left out "
            f"({'; '.join(causes) or 'disturbed'})."
        )
    steps = sorted({x for r in data["rows"] for x in r.get("reference_unsteady", []) + r.get("unsteady", [])})
    if steps:
        sentences.append(
            f"{len(steps)} unsteady run{'s were' if len(steps) != 1 else ' was'} kept "
            f"({'their' if len(steps) != 1 else 'its'} own steps varied after the warm-up and no outside cause "
            "was measured: the spread is in the CI)."
        )
    if unknown:
        pairs = ", ".join(f"{r['value']} vs {r['reference']}" for r in unknown)
        sentences.append(
            f"In {len(unknown)} group{'s' if len(unknown) != 1 else ''} it cannot tell: a side had "
            f"only disturbed runs ({pairs})."
        )
    for value in [v for v in data["values"] if any(r["value"] == v and not r.get("cannot_tell") for r in data["rows"])]:
        rows = [r for r in data["rows"] if r["value"] == value and not r.get("cannot_tell")]
        refs = " / ".join(sorted({r["reference"] for r in rows}))
        significant = [r for r in rows if r["significant"]]
        text = _sentence_of(value, refs, rows, data["within"])
        if not significant:
            answer = f"For this data, {data['title']} {value} vs {refs} has no significant effect."
        elif all(abs(r["speed_ratio"] - 1) <= data["within"] for r in significant):
            answer = (
                f"For this data, the effect of {data['title']} {value} is significant in places but within "
                f"±{data['within'] * 100:.0f} %."
            )
        elif len(rows) == 1:
            answer = f"For this data, {data['title']} {value} changes performance significantly."
        else:
            answer = (
                f"For this data, {data['title']} {value} changes performance significantly in "
                f"{_share(len(significant), len(rows))} groups."
            )
        sentences.append(text + ". " + answer)
    if unknown and len(unknown) == len(data["rows"]):
        sentences.append(f"For this data, {data['title']} cannot be judged: too few clean runs.")
    return " ".join(sentences)


def all_verdicts(
    points: list[Point], baseline_fabric: str | None = None, orders: dict[str, list[str]] | None = None
) -> dict:
    """Fabric first; the other axes (NCCL vs MPI, GPUDirect, NVLS, SHARP) only where the results varied them."""
    orders = orders or {}
    out = {"fabric": verdicts(points, "fabric", baseline_fabric, orders.get("fabric"))}
    for axis in (a for a in AXES if a != "fabric"):
        data = verdicts(points, axis, None, orders.get(axis))
        if not data["nothing_to_compare"]:
            out[axis] = data
    return out


def experiment_orders(dirs: list[Path]) -> dict[str, list[str]]:
    """The order of fabric/allreduce/gpudirect values in the experiment a sweep directory ran (its
    summary.json names the file): the first is the default reference."""
    from launch.plan.experiment import load_experiment

    orders: dict[str, list[str]] = {}
    for directory in dirs:
        summary = Path(directory) / "summary.json"
        try:
            data = read_json(summary, MAX_SUMMARY_BYTES, "sweep summary")  # perhaps another site's
            stored = data.get("verdict_orders")
            if not isinstance(stored, dict):  # a summary before verdict_orders: read its experiment file
                experiment = load_experiment(data["experiment_file"])
                stored = {
                    axis: experiment.matrix.get(axis) or ((experiment.fixed[axis],) if axis in experiment.fixed else ())
                    for axis in AXES
                }
        except (OSError, ValueError, KeyError, TypeError, AttributeError, UsageError):  # UntrustedInput is a ValueError
            continue
        for axis in AXES:
            for value in stored.get(axis) or ():
                if isinstance(value, str) and value not in orders.setdefault(axis, []):
                    orders[axis].append(value)
    return orders


IN_SWITCH = ("nvls", "sharp")
COLUMNS = (
    "benchmark",
    "model",
    "nodes",
    "ranks/node",
    "engine/backend",
    "allreduce",
    "gpudirect",
    "nvls",
    "sharp",
    "fabric",
    "compared",
    "reference",
    "value",
    "ratio",
    "95% CI",
    "verdict",
)


def _unsteady(runs: list[str] | None) -> str:
    return f", {len(runs)} unsteady" if runs else ""


def table_rows(data: dict) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a verdict table (the HTML page and the terminal show the same)."""
    # NVLS and SHARP only where a row set them (CPU and most GPU tables keep their columns)
    named = {c for c in IN_SWITCH if any(r.get(c, "default") != "default" for r in data["rows"])}
    header = [c for c in COLUMNS if c != data["axis"] and (c not in IN_SWITCH or c in named)]
    rows = []
    for r in data["rows"]:
        unit = f" {r['unit']}"
        cells = {
            "benchmark": r["benchmark"],
            "model": r["model"],
            "nodes": str(r["nodes"]),
            "ranks/node": str(r["ranks_per_node"]),
            "engine/backend": r["engine"],
            "allreduce": r.get("allreduce", "-"),
            "gpudirect": r.get("gpudirect", "-"),
            "nvls": r.get("nvls", "-"),
            "sharp": r.get("sharp", "-"),
            "fabric": r.get("fabric", "-"),
            "compared": f"{r['value']} vs {r['reference']}",
            "reference": f"{value_text(r['reference_mean'], r['unit'])}{unit} "
            f"(x{r['reference_repetitions']}{_unsteady(r.get('reference_unsteady'))})",
            "value": f"{value_text(r['mean'], r['unit'])}{unit} (x{r['repetitions']}{_unsteady(r.get('unsteady'))})",
            "ratio": f"{r['ratio']:.3f}",
            "95% CI": "-" if r["ci95"] is None else f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]",
            "verdict": r["verdict"],
        }
        rows.append([cells[c] for c in header])
    return header, rows
