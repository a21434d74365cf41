"""The Result: one result.json, read one way, with its derived figures in one place.

A result is written once by launch.results.assemble. Everything that reads one
(sweeps, compare, report, store, archive, predict) reads it here: `parse` for
bytes already in hand, `read` for one named file, `read_tree` for files and
directory trees. The same checks apply everywhere, and a file that is not a
result is described with the same words everywhere ("PATH: not a result: WHY").

`Result` is the parsed JSON object (a dict, so it stays what result.json holds)
with typed views of the fields the readers share; derived figures (scaling
efficiency, the bus bandwidth's confidence interval) are functions here only.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

from launch.errors import UsageError

SCHEMA_VERSION = 1          # what assemble writes
READABLE_SCHEMAS = (1,)     # what is read (add a version here with its reader when a field changes)


class ResultError(UsageError):
    """A file that is not a readable result (one line: path and why)."""


class Result(dict):
    """A result.json object; `path` is where it was read from (None if from elsewhere)."""

    path: Optional[Path] = None

    @property
    def run_id(self) -> str:
        return self["run_id"]

    @property
    def benchmark(self) -> Optional[str]:
        return self.get("benchmark")

    @property
    def status(self) -> Optional[str]:
        return self.get("status")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def world_size(self) -> Optional[int]:
        value = self.get("world_size")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def spec(self) -> dict:
        spec = self.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def fabric(self) -> Optional[str]:
        return self.spec.get("fabric")

    @property
    def total_img_per_s(self) -> Optional[float]:
        return number((self.get("throughput") or {}).get("total_img_per_s"))

    @property
    def sizes(self) -> list[dict]:
        """Allreduce rows (bytes, time_us, busbw_gbit_s, ...); [] for other benchmarks."""
        rows = self.get("sizes")
        return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def number(value: Any) -> Optional[float]:
    """A finite int or float as float; anything else (None, bool, str, NaN) is None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


# ------------------------------------------------------------------ reading

def parse(data: bytes | str, where: str | Path) -> Result:
    """The result in `data` (the text of a result.json found at `where`), or ResultError."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResultError(f"{where}: not a result: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ResultError(f"{where}: not a result: not a JSON object")
    if value.get("schema_version") not in READABLE_SCHEMAS:
        raise ResultError(f"{where}: not a result: unknown schema_version {value.get('schema_version')!r}")
    if not isinstance(value.get("run_id"), str):
        raise ResultError(f"{where}: not a result: no run_id")
    result = Result(value)
    result.path = Path(where) if isinstance(where, Path) else None
    return result


def read(path: Path | str) -> Result:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ResultError(f"{path}: not a result: cannot read it ({exc.strerror})") from None
    return parse(data, path)


def files_under(paths: Iterable[Path | str]) -> list[Path]:
    """Each path itself if it is a file, else every result.json below it, in order."""
    found = []
    for path in map(Path, paths):
        found += [path] if path.is_file() else sorted(path.rglob("result.json"))
    return found


def read_tree(paths: Iterable[Path | str]) -> tuple[list[Result], list[str]]:
    """Every result under `paths`, and one problem line per file that is not one."""
    results, problems = [], []
    for path in files_under(paths):
        try:
            results.append(read(path))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems


# ------------------------------------------------------------ derived figures

def scaling_efficiency(total_img_per_s: float, ranks: int, baseline_total_img_per_s: float,
                       baseline_ranks: int) -> float:
    """throughput(N) / (N x the baseline's per-rank throughput): 1.0 is perfect scaling."""
    return total_img_per_s / (ranks * baseline_total_img_per_s / baseline_ranks)


def busbw_ci95_gbit_s(row: dict) -> Optional[float]:
    """95 % CI half-width of an allreduce row's bus bandwidth, from its time's CI.

    busbw is proportional to 1/t, so to first order its relative half-width is the
    time's: busbw x ci95(t) / mean(t). None where the row has no time CI."""
    busbw, ci_us, mean_us = (number(row.get(k)) for k in ("busbw_gbit_s", "ci95_us", "time_us_mean"))
    if busbw is None or ci_us is None or not mean_us:
        return None
    return busbw * ci_us / mean_us
