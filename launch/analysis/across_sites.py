"""One report across sites: the results of several sites (pulled from a registry by `fabric-bench
results pull`, or results whose origin differs) side by side where they are comparable, and
where they are not, why (never silently).

- A result's *site*: the site of the pulled archive it came in (launch.sharing.pulled), else the
  host of its origin (launch.results.store.origin_of).
- A *group* is one comparable key: the baseline key (launch.analysis.baseline.Key: the kind, what
  ran (model, grid or message size), engine or backend, nodes x ranks, GPUs, the knobs and the
  settings that change the figure) without the fabric, which is what sites differ in.
- An *entry* is what one site ran of a group on one fabric, stack and benchmark version: its
  runs' figure of merit (the kind's), mean and 95 % CI (launch.analysis.aggregate), its
  disturbed runs left out and named, the site's baseline where it has one, how complete its
  system description is (launch.site.system_description), and links to where each result came
  from (the pulled archive's digest, or the result file).
- Entries are *comparable* when their stack digest and benchmark version (the bundle commit
  that wrote them) are the same; a result that records no bundle commit is comparable with
  nothing. Each set of comparable entries is one table, ratios against its first row (the
  verdicts' method: launch.analysis.verdict.compare); every other set is named with why it is
  not beside the first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Protocol, Sequence

from containers.untrusted import UntrustedInput, read_json
from launch.analysis import aggregate, baseline, verdict
from launch.results import store
from launch.figures import value_text
from launch.results.result import Result, as_result, disturbed, field_of, number
from launch.site.system_description import COMPLETE_FROM, NEEDS, description_of

UNKNOWN_VERSION = "unknown"
NO_ORIGIN = "no origin recorded"
SYSTEM_MAX_BYTES = 2**20
MAX_PLOTTED_GROUPS = 12
POOLED_NOTE = (
    "The verdicts, plots and tables after this section pool the runs of one configuration across "
    "sites; this section keeps the sites apart and compares only what ran on one stack and one "
    "benchmark version."
)


class PulledArchive(Protocol):
    """What the report reads of a pulled archive's record (launch.sharing.pulled.Pulled)."""

    @property
    def site(self) -> str: ...

    @property
    def signer(self) -> str: ...

    @property
    def archive_digest(self) -> str: ...

    @property
    def reference(self) -> str: ...

    @property
    def result_paths(self) -> tuple[Path, ...]: ...

    @property
    def archive_path(self) -> Path: ...

    @property
    def system_path(self) -> Optional[Path]: ...


@dataclass(frozen=True)
class Source:
    """Where one result came from: its site, and the pulled archive it came in (None: a file here)."""

    site: str
    origin: str
    pulled: Optional[PulledArchive] = None


def short_digest(digest: str, length: int = 19) -> str:
    return digest if len(digest) <= length else digest[:length] + "…"


def version_of(result: Result) -> str:
    """The benchmark version a result was written by: its origin's bundle commit, else UNKNOWN_VERSION."""
    origin = field_of(result, "origin")
    commit = origin.get("bundle_commit") if isinstance(origin, dict) else None
    return str(commit) if isinstance(commit, str) and commit and commit != UNKNOWN_VERSION else UNKNOWN_VERSION


def comparable_key(result: Result) -> Optional[baseline.Key]:
    """The baseline key without the fabric (None: no kind or ranks this bundle knows)."""
    key = baseline.key_of(result)
    return replace(key, fabric="") if key is not None else None


def key_words(key: baseline.Key) -> str:
    knobs = [f"allreduce {key.allreduce}" if key.allreduce else "", f"gdr-{key.gpudirect}" if key.gpudirect else ""]
    knobs += [f"{name} {value}" for name, value in key.settings]
    gpus = f", {key.gpus_per_node} GPU/node" if key.gpus_per_node else ""
    nodes = f"{key.nodes} node{'s' if key.nodes != 1 else ''}"
    per_node = key.ranks // key.nodes if key.nodes else key.ranks
    return " · ".join([key.benchmark, key.subject, key.via, f"{nodes} x {per_node} ranks{gpus}", *filter(None, knobs)])


def sources_of(results: Sequence[Result], pulled: Sequence[PulledArchive]) -> dict[int, Source]:
    """id(result) -> its Source: the pulled archive whose results hold its file, else its origin's
    host; results from before the `origin` field are all of one site, NO_ORIGIN (their ranks' hosts
    are nodes, not sites)."""
    by_path = {Path(p).resolve(): record for record in pulled for p in record.result_paths}
    found = {}
    for result in results:
        origin, recorded = store.origin_of(result), field_of(result, "origin")
        record = by_path.get(Path(result.path).resolve()) if result.path is not None else None
        if record is not None:
            site = record.site
        else:
            site = origin.rsplit("@", 1)[0] if isinstance(recorded, dict) and recorded.get("host") else NO_ORIGIN
        found[id(result)] = Source(site, origin, record)
    return found


def system_of(record: PulledArchive, notes: list[str]) -> Optional[dict]:
    """The pulled archive's system description (read within bounds; refused: a note, and None)."""
    if record.system_path is None:
        return None
    try:
        value = read_json(record.system_path, SYSTEM_MAX_BYTES, "system description")
    except UntrustedInput as exc:
        notes.append(f"{record.site}: {exc}; its results are described by themselves alone")
        return None
    return value if isinstance(value, dict) else None


@dataclass
class Entry:
    """What one site ran of one group on one fabric, stack and benchmark version."""

    site: str
    fabric: str
    stack: str
    version: str
    runs: list[Result]  # its clean runs (all of them where every run was disturbed)
    left_out: list[dict]  # disturbed runs: run_id, causes
    point: aggregate.Point
    sources: list[Source]
    baseline_words: str = ""
    baseline_ci95: Optional[tuple[float, float]] = None
    description: dict = field(default_factory=dict)
    ratio: Optional[dict] = None  # against its set's first row

    @property
    def label(self) -> str:
        return f"{self.site} · {self.fabric}"

    def links(self) -> list[dict]:
        """Each pulled archive its runs came in (by digest), and each result file read here."""
        out, seen = [], set()
        for source, run in zip(self.sources, self.runs):
            if source.pulled is not None:
                if source.pulled.archive_digest not in seen:
                    seen.add(source.pulled.archive_digest)
                    out.append(
                        {
                            "text": f"archive {short_digest(source.pulled.archive_digest, 23)}",
                            "href": Path(source.pulled.archive_path).resolve().as_uri(),
                            "title": f"{source.pulled.reference}, signed by {source.pulled.signer}",
                        }
                    )
            elif run.path is not None:
                out.append({"text": f"{run.run_id}", "href": Path(run.path).resolve().as_uri(), "title": str(run.path)})
        return out

    def as_dict(self) -> dict:
        metric = self.point.metric
        return {
            "site": self.site,
            "fabric": self.fabric,
            "stack": self.stack,
            "version": self.version,
            "figure": metric.name,
            "unit": metric.unit,
            "mean": self.point.mean,
            "ci95": self.point.ci95,
            "runs": [r.run_id for r in self.runs],
            "disturbed": self.point.disturbed,
            "left_out": self.left_out,
            "baseline": {
                "words": self.baseline_words,
                "ci95": list(self.baseline_ci95) if self.baseline_ci95 else None,
            },
            "description": self.description,
            "ratio": self.ratio,
            "links": self.links(),
            "signers": sorted({s.pulled.signer for s in self.sources if s.pulled is not None}),
        }


def point_of(label: str, key: baseline.Key, fabric: str, every: list[Result]) -> aggregate.Point:
    """The entry's runs as one point (launch.analysis.aggregate's estimate); disturbed runs left out
    unless every run was."""
    clean = [r for r in every if not disturbed(r)]
    runs = clean or every
    positive = ([x for x in aggregate.run_samples(r) if x > 0] for r in runs)
    samples = [s for s in positive if s] or [[float(aggregate.run_value(r) or 1.0)] for r in runs]
    return aggregate.Point(
        series=label,
        series_key=(label,),
        benchmark=key.benchmark,
        fabric=fabric,
        ranks=key.ranks,
        nodes=key.nodes,
        runs=list(runs),
        estimate=aggregate.mean_ci(samples),
        log_estimate=aggregate.mean_ci([[math.log(x) for x in s] for s in samples]),
        left_out=[aggregate.left_out_entry(r) for r in every if all(r is not x for x in runs)],
        disturbed=not clean,
    )


def _finite_pair(value: object) -> Optional[tuple[float, float]]:
    if isinstance(value, list) and len(value) == 2 and all(number(v) is not None for v in value):
        low, high = (float(v) for v in value)
        return (low, high) if low <= high else None
    return None


def recorded_baseline(result: Result) -> Optional[tuple[str, tuple[float, float]]]:
    """The baseline the site recorded beside the result (baseline.json, launch.analysis.baseline),
    where it was ready: its words and CI, checked by type (it travelled with the result)."""
    if result.path is None:
        return None
    path = result.path.parent / store.BASELINE_FILE
    if not path.is_file():
        return None
    try:
        record = read_json(path, SYSTEM_MAX_BYTES, "baseline verdict")
    except UntrustedInput:
        return None
    base = record.get("baseline") if isinstance(record, dict) else None
    if not isinstance(base, dict) or base.get("ready") is not True:
        return None
    ci, median, runs = _finite_pair(base.get("ci95")), number(base.get("median")), base.get("runs")
    if ci is None or median is None or not isinstance(runs, int) or isinstance(runs, bool):
        return None
    return f"median {median:.4g}, 95 % CI {ci[0]:.4g}-{ci[1]:.4g} from {runs} clean runs (as the site recorded it)", ci


def site_baseline(entry: Entry) -> tuple[str, Optional[tuple[float, float]]]:
    """The site's baseline for the entry's key: from its runs here (the newest run's baseline:
    launch.analysis.baseline), else the one it recorded beside its newest result, else how far it is."""
    runs = [run for run in (baseline.run_of(r, entry.sources[0].origin) for r in entry.runs) if run is not None]
    history = sorted(runs, key=baseline.order)
    if not history:
        return "none: no run with a figure", None
    base = baseline.baseline_before(history, len(history) - 1)
    if base.ready:
        ci = base.figure_ci()
        assert ci is not None
        return base.words(), ci
    newest = max(entry.runs, key=lambda r: (baseline.when_of(r.run_id) or 0.0, r.run_id))
    recorded = recorded_baseline(newest)
    if recorded is not None:
        return recorded
    return f"none here ({len(base.run_ids)} of {baseline.MIN_RUNS} clean runs before the newest)", None


def describe_entry(entry: Entry, systems: dict[str, Optional[dict]]) -> dict:
    """The lowest completeness among the entry's runs, and every field missing from any of them."""
    found = [
        description_of(run, system=systems.get(source.pulled.archive_digest) if source.pulled else None)
        for source, run in zip(entry.sources, entry.runs)
    ]
    worst = min(found, key=lambda d: d.score)
    missing = [need.name for need in NEEDS if any(need.name in d.missing for d in found)]
    return {
        "score": worst.score,
        "complete": worst.complete,
        "missing": missing,
        "words": worst.words()
        if worst.complete
        else f"incomplete description ({worst.score:.0%}): missing " + ", ".join(missing),
        "fields": worst.as_dict()["fields"],
    }


def why_not(first: Entry, other: Entry) -> list[str]:
    """Why `other` is not beside `first` ([]: it is comparable)."""
    reasons = []
    if other.stack != first.stack:
        reasons.append(
            f"stack differs: {short_digest(first.stack)} at {first.site}, {short_digest(other.stack)} at {other.site}"
        )
    unknown = [e.site for e in (first, other) if e.version == UNKNOWN_VERSION]
    if unknown:
        reasons.append(
            f"benchmark version unknown at {' and '.join(dict.fromkeys(unknown))} (its results record no bundle commit)"
        )
    elif other.version != first.version:
        reasons.append(
            f"benchmark version differs: {first.version[:12]} at {first.site}, {other.version[:12]} at {other.site}"
        )
    return reasons


@dataclass
class Group:
    key: baseline.Key
    sets: list[list[Entry]]  # comparable entries; the first set is the one most sites share

    @property
    def sites(self) -> list[str]:
        return sorted({e.site for s in self.sets for e in s})

    def as_dict(self) -> dict:
        first = self.sets[0][0]
        metric = first.point.metric
        return {
            "key": self.key.as_dict(),
            "words": key_words(self.key),
            "figure": {"name": metric.name, "label": metric.label, "unit": metric.unit},
            "higher_is_better": metric.higher_is_better,
            "sites": self.sites,
            "sets": [
                {
                    "stack": s[0].stack,
                    "version": s[0].version,
                    "entries": [e.as_dict() for e in s],
                    "not_beside_first": [] if count == 0 else why_not(first, s[0]),
                }
                for count, s in enumerate(self.sets)
            ],
        }


def _sets(entries: list[Entry]) -> list[list[Entry]]:
    """Comparable entries together (same stack and known version; an unknown version stands
    alone), the set with the most sites (then runs) first, rows by site and fabric."""
    sets: dict[tuple, list[Entry]] = {}
    for position, entry in enumerate(entries):
        alone = (position,) if entry.version == UNKNOWN_VERSION else ()
        sets.setdefault((entry.stack, entry.version, *alone), []).append(entry)
    ordered = [sorted(s, key=lambda e: (e.site, e.fabric)) for s in sets.values()]
    return sorted(ordered, key=lambda s: (-len({e.site for e in s}), -sum(len(e.runs) for e in s), s[0].label))


def _ratios(entries: list[Entry]) -> None:
    first = entries[0]
    for entry in entries[1:]:
        sides = [f"{e.site} ({len(e.runs)})" for e in (first, entry) if e.point.disturbed]
        if sides:  # which runs and by what: the report's run health table names them
            entry.ratio = {"verdict": f"cannot tell: every run was disturbed at {' and '.join(sides)}"}
            continue
        compared = verdict.compare(first.point, entry.point)
        entry.ratio = {k: compared[k] for k in ("ratio", "ci95", "speed_ratio", "speed_ci95", "verdict")}


@dataclass
class AcrossSites:
    groups: list[Group]  # those that more than one site ran
    one_site: list[Group]  # those that one site alone ran
    sites: dict[str, dict]  # site -> its origins, signers and archives
    without_figure: list[str]  # results left out: not ok, or no kind and ranks
    notes: list[str]

    @property
    def several_sites(self) -> bool:
        return len(set(self.sites) - {NO_ORIGIN}) > 1

    def as_dict(self) -> dict:
        return {
            "sites": self.sites,
            "groups": [g.as_dict() for g in self.groups],
            "one_site": [{"words": key_words(g.key), "site": g.sites[0]} for g in self.one_site],
            "without_figure": self.without_figure,
            "notes": self.notes,
            "pooled_note": POOLED_NOTE,
            "needs": [{"name": n.name, "weight": n.weight, "tells": n.tells} for n in NEEDS],
            "complete_from": COMPLETE_FROM,
        }


def survey(results: Sequence[Result], pulled: Sequence[PulledArchive] = ()) -> AcrossSites:
    """The groups, sets and entries of `results` (module docstring); none where they all come from
    one site."""
    sources = sources_of(results, pulled)
    sites: dict[str, dict] = {}
    for result in results:
        source = sources[id(result)]
        site = sites.setdefault(source.site, {"origins": [], "signers": [], "archives": [], "runs": 0})
        site["runs"] += 1
        for name, value in (
            ("origins", source.origin),
            ("signers", source.pulled.signer if source.pulled else None),
            ("archives", source.pulled.archive_digest if source.pulled else None),
        ):
            if value is not None and value not in site[name]:
                site[name].append(value)
    if len(set(sites) - {NO_ORIGIN}) <= 1:  # one site (results from before origins are not one more)
        return AcrossSites([], [], dict(sites), [], [])
    notes: list[str] = []
    systems = {
        record.archive_digest: system_of(record, notes)
        for record in {r.archive_digest: r for r in pulled}.values()
        if any(s.pulled is record for s in sources.values())
    }
    grouped: dict[baseline.Key, dict[tuple, list[Result]]] = {}
    without_figure, seen = [], set()
    for result in results:
        source = sources[id(result)]
        key = comparable_key(result)
        if key is None or not aggregate.usable(result) or not (aggregate.run_value(result) or 0) > 0:
            without_figure.append(f"{source.site}: {result.run_id} ({result.status or 'no status'})")
            continue
        if (result.run_id, source.origin) in seen:  # the same run pulled twice: once
            continue
        seen.add((result.run_id, source.origin))
        entry_key = (source.site, aggregate.fabric_label(result), baseline.stack_of(result), version_of(result))
        grouped.setdefault(key, {}).setdefault(entry_key, []).append(result)
    groups = []
    for key, by_entry in grouped.items():
        entries = []
        for (site, fabric, stack, version), runs in sorted(by_entry.items()):
            point = point_of(f"{site} · {fabric}", key, fabric, runs)
            entry = Entry(
                site=site,
                fabric=fabric,
                stack=stack,
                version=version,
                runs=[as_result(r) for r in point.runs],
                left_out=point.left_out,
                point=point,
                sources=[sources[id(r)] for r in point.runs],
            )
            entry.baseline_words, entry.baseline_ci95 = site_baseline(entry)
            entry.description = describe_entry(entry, systems)
            entries.append(entry)
        sets = _sets(entries)
        for one in sets:
            _ratios(one)
        groups.append(Group(key, sets))
    groups.sort(key=lambda g: key_words(g.key))
    return AcrossSites(
        groups=[g for g in groups if len(g.sites) > 1],
        one_site=[g for g in groups if len(g.sites) == 1],
        sites=dict(sorted(sites.items())),
        without_figure=without_figure,
        notes=notes,
    )


def table(entries: list[dict], unit: str) -> tuple[list[str], list[list[str]]]:
    """One set's rows as text (report_data.json and the terminal; the page adds its links)."""
    header = ["site", "fabric", f"mean ({unit})", "95% CI", "runs", "vs first row", "site's baseline", "description"]
    rows = []
    for entry in entries:
        ci = entry["ci95"]
        ratio = entry["ratio"]
        if ratio is None:
            against = "reference"
        elif "ratio" not in ratio:
            against = str(ratio["verdict"])
        else:
            bounds = f" [{ratio['ci95'][0]:.3f}-{ratio['ci95'][1]:.3f}]" if ratio.get("ci95") else ""
            against = f"{ratio['ratio']:.3f}{bounds}: {ratio['verdict']}"
        rows.append(
            [
                entry["site"],
                entry["fabric"],
                value_text(entry["mean"], unit),
                "-" if ci is None or not math.isfinite(ci) else f"±{value_text(ci, unit)}",
                str(len(entry["runs"]))
                + (f" ({len(entry['left_out'])} disturbed left out)" if entry["left_out"] else "")
                + (" (all disturbed)" if entry["disturbed"] else ""),
                against,
                entry["baseline"]["words"],
                entry["description"]["words"],
            ]
        )
    return header, rows


def lines(data: dict) -> list[str]:
    """The section in words, for the terminal: per group, each set's rows and why a set is apart."""
    out = []
    for group in data["groups"]:
        out.append(f"across sites: {group['words']} ({', '.join(group['sites'])})")
        for count, one in enumerate(group["sets"]):
            if count:
                out.append(
                    f"  not compared with {group['sets'][0]['entries'][0]['site']}: "
                    + ", ".join(e["site"] for e in one["entries"])
                    + f": {'; '.join(one['not_beside_first'])}"
                )
            for entry in one["entries"]:
                figure = f"{value_text(entry['mean'], entry['unit'])} {entry['unit']}"
                ratio = entry["ratio"]
                against = "" if ratio is None else f", {ratio.get('verdict')}"
                out.append(
                    f"  {entry['site']} {entry['fabric']}: {figure}{against}; site's baseline: "
                    f"{entry['baseline']['words']}; {entry['description']['words']}"
                )
    return out
