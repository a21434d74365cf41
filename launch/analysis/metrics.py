"""A run's figure and its baseline verdict as metrics a site's Prometheus scrapes: OpenMetrics text
in node_exporter's textfile-collector way (docs/baselines.md).

One file per comparable key (`fabricbench_<key id>.prom`), rewritten by each run of the key and by
`fabric-bench baseline`: written beside, then renamed (containers.files.write_atomic), so the
collector never reads half a file; its modification time (node_textfile_mtime_seconds) says how
fresh it is. No sample carries a timestamp (the collector refuses them). Values in base units
(bytes, seconds); names `fabricbench_<figure>_<unit>` after the kind's figure of merit. Every
series carries the key's labels; the stack digest, image, Slurm job and run id are labels of
`fabricbench_run_info` only, so a new image or job never starts new series of the figures. About
15 series per key (MAX_SERIES bounds it). This site's runs only, unless `fabric-bench baseline
--any-origin` asked for every origin's: then a file whose run or baseline holds runs pulled from
other sites carries, on every series, the label `pulled_from` (the sites that signed them), so a
query for `pulled_from=""` reads this site's own.

The text is the part of OpenMetrics that node_exporter's parser also reads: gauges, `# UNIT`
(read as a comment there) and the closing `# EOF`. It is made from a verdict record (what
baseline.json holds: launch.analysis.baseline.Verdict.record), nothing else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

METRICS_ENV = "FABRIC_BENCH_METRICS_DIR"
PREFIX = "fabricbench"
MAX_SERIES = 200
# a figure's unit -> (base unit, factor to it, the unit's suffix in the figure's name)
UNITS = {
    "Gbit/s": ("bytes_per_second", 1e9 / 8, "_gbit_s"),
    "img/s": ("images_per_second", 1.0, "_img_per_s"),
    "s": ("seconds", 1.0, "_s"),
}
KEY_LABELS = ("fabric", "benchmark", "subject", "via", "ranks", "nodes")
STATES = ("normal", "slow", "fast", "no baseline yet", "disturbed")  # launch.results.store.BASELINE_VERDICTS


def directory(given: Optional[Path] = None) -> Optional[Path]:
    """Where metrics go: the directory given, else $FABRIC_BENCH_METRICS_DIR; None: nowhere."""
    said = given or os.environ.get(METRICS_ENV)
    return Path(said) if said else None


def family(figure: dict) -> tuple[str, str, float]:
    """(the figure's metric name without its unit, the base unit, the factor to it)."""
    name, unit = str(figure.get("name") or "figure"), str(figure.get("unit") or "")
    base, factor, suffix = UNITS.get(unit, ("", 1.0, ""))
    stem = name.removesuffix(suffix) if suffix else name
    stem = re.sub(r"[^a-zA-Z0-9_]", "_", stem).strip("_") or "figure"
    return f"{PREFIX}_{stem}", base, factor


def escape(value: Any) -> str:
    """A label value as OpenMetrics writes it (backslash, double quote and newline escaped)."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(pairs: dict[str, Any]) -> str:
    return "{" + ",".join(f'{name}="{escape(value)}"' for name, value in pairs.items()) + "}"


def number(value: float) -> str:
    return repr(float(value))


def text(record: dict) -> str:
    """The OpenMetrics text of one verdict record."""
    key, figure, base = record.get("key") or {}, record.get("figure") or {}, record.get("baseline") or {}
    difference, run = record.get("difference") or {}, record.get("run") or {}
    ours = {"key": record.get("key_id"), **{name: key.get(name) for name in KEY_LABELS}}
    pulled = {str(run.get("pulled_from") or ""), *map(str, (base.get("pulled_from") or {}).values())} - {""}
    if pulled:  # runs other sites signed (--any-origin): labelled with those sites
        ours["pulled_from"] = ",".join(sorted(pulled))
    stem, unit, factor = family(figure)
    named = f"{stem}_{unit}" if unit else stem
    out: list[str] = []

    def gauge(name: str, what: str, samples: list[tuple[dict, Optional[float]]], unit_of: str = "") -> None:
        known = [f"{name}{labels({**ours, **extra})} {number(value)}" for extra, value in samples if value is not None]
        if known:
            out.extend(
                [f"# TYPE {name} gauge", f"# HELP {name} {what}"] + ([f"# UNIT {name} {unit_of}"] if unit_of else [])
            )
            out.extend(known)

    def scaled(value: Any) -> Optional[float]:
        return None if value is None else float(value) * factor

    ci = base.get("ci95") or [None, None]
    gauge(named, f"the newest run's {figure.get('name')} per comparable key", [({}, scaled(figure.get("value")))], unit)
    gauge(
        f"{stem}_baseline_{unit}" if unit else f"{stem}_baseline",
        f"this site's baseline of {figure.get('name')}: median and 95 % bootstrap CI",
        [
            ({"statistic": "median"}, scaled(base.get("median"))),
            ({"statistic": "ci95_low"}, scaled(ci[0])),
            ({"statistic": "ci95_high"}, scaled(ci[1])),
        ],
        unit,
    )
    gauge(f"{PREFIX}_baseline_runs", "clean runs the baseline rests on", [({}, base.get("runs"))])
    gauge(f"{PREFIX}_baseline_spread_ratio", "the baseline runs' relative spread", [({}, base.get("spread"))], "ratio")
    gauge(
        f"{PREFIX}_verdict",
        "the newest run's verdict against this site's baseline: 1 for its verdict, 0 for the others",
        [({"verdict": state.replace(" ", "_")}, 1.0 if record.get("verdict") == state else 0.0) for state in STATES],
    )
    gauge(
        f"{PREFIX}_difference_ratio",
        "the newest run's speed over the baseline median's, minus 1",
        [({}, difference.get("speed_ratio_minus_1"))],
        "ratio",
    )
    gauge(
        f"{PREFIX}_difference_confidence_ratio",
        "the share of bootstrap draws on the verdict's side of its margin",
        [({}, difference.get("confidence"))],
        "ratio",
    )
    gauge(
        f"{PREFIX}_run_timestamp_seconds",
        "when the newest run started (unix time)",
        [({}, run.get("when_unix"))],
        "seconds",
    )
    info = {
        "run_id": record.get("run_id"),
        "stack_digest": run.get("stack"),
        "bundle_commit": run.get("bundle_commit"),
        "image": run.get("image") or "",
        "slurm_job": run.get("slurm_job") or "",
    }
    gauge(f"{PREFIX}_run_info", "the newest run of a key: its run id, stack digest, image and Slurm job", [(info, 1.0)])
    series = sum(1 for line in out if not line.startswith("#"))
    assert series <= MAX_SERIES, f"{series} series for one key"
    return "\n".join(out) + "\n# EOF\n"


def write(where: Path, record: dict) -> Path:
    """The key's metrics file in `where` (made if missing), replaced whole."""
    from containers.files import write_atomic

    where.mkdir(parents=True, exist_ok=True)
    return write_atomic(where / f"{PREFIX}_{record.get('key_id')}.prom", text(record), mode=0o644)
