"""nccl-tests' output read as data: what `all_reduce_perf` printed, so the harness's own allreduce
(bench.allreduce) can be set beside it on the same machine (benchmarks/gpu_check.py).

nccl-tests times `-n` operations back to back after `-w` warm-ups, per size, out of place and in
place, and prints per row: size (B), count, type, redop, root (newer versions), then for each
placement time (us), algbw and busbw (GB/s, 1e9 bytes) and #wrong. A row may carry mpirun's
`--tag-output` prefix (`[1,0]<stdout>:`). Standard library only.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_VERSION = re.compile(r"nccl-tests version (\S+)")
_SETTINGS = re.compile(r"nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+).*?warmup iters: (\d+)\s+iters: (\d+)")
_RANK = re.compile(r"^#\s+Rank\s+\d+ ")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([\d.]+)")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "N/A" where nccl-tests does not check


def _placement(cells: list[str]) -> dict:
    time_us, algbw, busbw, wrong = cells
    return {
        "time_us": _number(time_us),
        "algbw_gbyte_s": _number(algbw),
        "busbw_gbyte_s": _number(busbw),
        "wrong": _number(wrong),
    }


def parse(text: str) -> dict:
    """{'version', 'ranks', 'warmup', 'iters', 'rows': [{'bytes', 'count', 'type', 'redop',
    'out_of_place': {...}, 'in_place': {...}}], 'avg_busbw_gbyte_s'}; fields not printed are None."""
    out: dict = {"version": None, "ranks": None, "warmup": None, "iters": None, "rows": [], "avg_busbw_gbyte_s": None}
    ranks = 0
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw).rstrip()
        if (match := _VERSION.search(line)) and out["version"] is None:
            out["version"] = match.group(1)
        if (match := _SETTINGS.search(line)) and out["warmup"] is None:
            out["warmup"], out["iters"] = int(match.group(5)), int(match.group(6))
        if _RANK.match(line):
            ranks += 1
        if match := _AVG.search(line):
            out["avg_busbw_gbyte_s"] = float(match.group(1))
        cells = line.split()
        if len(cells) in (12, 13) and cells[0].isdigit() and cells[1].isdigit():
            numbers = cells[-8:]  # out of place: time algbw busbw #wrong; in place: the same
            out["rows"].append(
                {
                    "bytes": int(cells[0]),
                    "count": int(cells[1]),
                    "type": cells[2],
                    "redop": cells[3],
                    "out_of_place": _placement(numbers[:4]),
                    "in_place": _placement(numbers[4:]),
                }
            )
    out["ranks"] = ranks or None
    return out
