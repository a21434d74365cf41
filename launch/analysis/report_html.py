"""The report's one self-contained HTML page: the section across sites first where the results
come from several sites (launch.analysis.across_sites_html), the verdicts, the study's answer, the
figures (PNGs embedded as base64, nothing fetched), then the tables; every text escaped."""

from __future__ import annotations

import html

from launch.analysis import verdict
from launch.analysis.across_sites_html import render as render_across_sites


def _html_table(header: list[str], rows: list[list[str]], css: str = "") -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_verdicts(judged: dict) -> str:
    esc = html.escape
    parts = []
    for axis, data in judged.items():
        heading = {
            "fabric": "Does the fabric change performance?",
            "allreduce": "Does NCCL vs MPI change performance?",
            "gpudirect": "Does GPUDirect change performance?",
        }[axis]
        parts.append(f'<section class="verdict" id="verdict-{esc(axis)}"><h2>{esc(heading)}</h2>')
        if data["rows"]:
            header, rows = verdict.table_rows(data)
            parts.append(_html_table(header, rows, "verdicts"))
            parts.append(
                f'<p class="method">Reference {esc(data["title"])}: {esc(str(data["reference"]))}. '
                f"Method: {esc(data['method'])}.</p>"
            )
        parts.append(f'<p class="answer">{esc(data["paragraph"])}</p></section>')
    return "".join(parts)


def render_study(study: dict | None) -> str:
    """The study's question, its predicted answer with ranges, and where every input came from."""
    if not study:
        return ""
    esc = html.escape
    answer = "".join(f"<li>{esc(line)}</li>" for line in study["answer"])
    return (
        f'<section class="study" id="study-{esc(study["study"])}"><h2>Today\'s GPUs ({esc(study["study"])}, '
        f'predicted): {esc(study["question"])}</h2><ul class="answer">{answer}</ul>'
        f'<p class="method">Predicted, not measured: {esc(study["non_network"])}. Inputs: '
        f"{esc(study['inputs'])}</p></section>"
    )


def render_locate(located: list[dict]) -> str:
    """What each `fabric-bench locate` run named (its heat-map is among the plots)."""
    esc = html.escape
    lines = []
    for found in located:
        named = [f"slow node {n}" for n in found["slow_nodes"]] + [f"slow link {a}-{b}" for a, b in found["slow_links"]]
        lines.append(
            f"<li>{esc(found['dir'])}: {len(found['nodes'])} nodes ({esc(found['pattern'])}); "
            f"{esc(', '.join(named)) if named else 'nothing named'}</li>"
        )
    return f"<h2>Pairwise bandwidth (locate)</h2><ul>{''.join(lines)}</ul>" if lines else ""


def render_html(title: str, data: dict, images: dict[str, str]) -> str:
    esc = html.escape
    plots = "".join(
        f'<figure id="plot-{esc(name)}"><img alt="{esc(p["title"])}" src="data:image/png;base64,{images[name]}">'
        f"<figcaption>{esc(p['title'])}: {esc(', '.join(s['name'] for s in p['series']))}</figcaption></figure>"
        for name, p in data["plots"].items()
    )
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:90%}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}figure{{display:inline-block;margin:1em;max-width:100%}}
figure img{{max-width:100%;height:auto}}p.answer{{font-size:110%;max-width:60em}}.scroll{{overflow-x:auto}}</style>
</head><body><h1>{esc(title)}</h1><p>{data["runs"]} runs</p>
<p class="stacks">{"<br>".join(esc(line) for line in data.get("stacks", []))}</p>
{render_across_sites(data.get("across_sites"))}
{render_verdicts(data["verdicts"])}
{render_study(data.get("study"))}
{render_locate(data.get("locate", []))}
<h2>Plots</h2>
{plots}
<h2>Points (repetitions aggregated)</h2>
<p class="method">{esc(data["ci_method"])}.</p>
<div class="scroll">{_html_table(data["points_table"]["header"], data["points_table"]["rows"], "points")}</div>
<h2>Runs</h2>
<div class="scroll">{_html_table(data["table"]["header"], data["table"]["rows"], "runs")}</div>
<h2>Run health: plausibility, preflight, placement, stragglers, stalls</h2>
<div class="scroll">{_html_table(data["health_table"]["header"], data["health_table"]["rows"], "health")}</div>
</body></html>
"""
