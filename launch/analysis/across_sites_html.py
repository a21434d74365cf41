"""The report page's section across sites (launch.analysis.across_sites): per comparable group, a
table of each set of comparable entries with links to where each result came from, the reason
every other set is not beside it, and what was left out; every text escaped."""

from __future__ import annotations

import html

from launch.analysis.across_sites import short_digest, table


INCOMPLETE_STYLE = "color:#a00;text-align:left"  # an incomplete description stands out


def _cell(text: str, css: str = "") -> str:
    if not css:
        return f"<td>{html.escape(text)}</td>"
    style = f' style="{INCOMPLETE_STYLE}"' if "incomplete" in css.split() else ""
    return f'<td class="{css}"{style}>{html.escape(text)}</td>'


def _links(entry: dict) -> str:
    return ", ".join(
        f'<a href="{html.escape(link["href"])}" title="{html.escape(link["title"])}">{html.escape(link["text"])}</a>'
        for link in entry["links"]
    )


def _set_table(entries: list[dict], unit: str) -> str:
    header, rows = table(entries, unit)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in [*header, "results"])
    body = []
    for entry, row in zip(entries, rows):
        cells = [_cell(text) for text in row[:-1]]
        cells.append(_cell(row[-1], "description" if entry["description"]["complete"] else "description incomplete"))
        body.append(f"<tr>{''.join(cells)}<td>{_links(entry)}</td></tr>")
    return f'<table class="across-sites"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _sites(sites: dict) -> str:
    esc = html.escape
    items = []
    for name, site in sites.items():
        signed = f", signed by {', '.join(site['signers'])}" if site["signers"] else ", read here (not pulled)"
        archives = f", {len(site['archives'])} archive(s)" if site["archives"] else ""
        items.append(f"<li>{esc(name)}: {site['runs']} results{esc(signed)}{esc(archives)}</li>")
    return f'<ul class="sites">{"".join(items)}</ul>'


def render(data: dict | None) -> str:
    """The section, or "" where the report holds one site's results."""
    if not data:
        return ""
    esc = html.escape
    parts = [
        '<section class="across-sites" id="across-sites"><h2>Across sites: comparable results side by side</h2>',
        _sites(data["sites"]),
    ]
    for number, group in enumerate(data["groups"]):
        unit = group["figure"]["unit"]
        parts.append(
            f'<section class="across-group" id="across-group-{number}"><h3>{esc(group["words"])}</h3>'
            f'<p class="method">{esc(group["figure"]["label"])} ({esc(unit)}); each table: one stack and one '
            f"benchmark version; ratios against its first row</p>"
        )
        first = group["sets"][0]
        for count, one in enumerate(group["sets"]):
            caption = f"stack {short_digest(one['stack'])}, benchmark version {one['version'][:12]}"
            if count:
                sites = ", ".join(sorted({e["site"] for e in one["entries"]}))
                parts.append(
                    f'<p class="not-compared">Not compared with {esc(first["entries"][0]["site"])}: '
                    f"{esc(sites)}: {esc('; '.join(one['not_beside_first']))}</p>"
                )
            parts.append(f'<p class="set">{esc(caption)}</p>{_set_table(one["entries"], unit)}')
        parts.append("</section>")
    if data["one_site"]:
        alone = "".join(f"<li>{esc(g['words'])}: {esc(g['site'])}</li>" for g in data["one_site"])
        parts.append(f'<h3>Ran at one site only (nothing to compare)</h3><ul class="one-site">{alone}</ul>')
    if data["without_figure"]:
        parts.append(
            f'<p class="left-out">Not in these tables (no figure: not ok, or no kind): '
            f"{esc('; '.join(data['without_figure']))}</p>"
        )
    for note in data["notes"]:
        parts.append(f'<p class="note">{esc(note)}</p>')
    needs = ", ".join(f"{n['name']} {n['weight']:.0%}" for n in data["needs"])
    parts.append(
        f'<p class="method">Description: the share of what a reviewer needs that the result, its site file '
        f"and its system description tell ({esc(needs)}); under {data['complete_from']:.0%} it is marked incomplete. "
        f"{esc(data['pooled_note'])}</p></section>"
    )
    return "".join(parts)
