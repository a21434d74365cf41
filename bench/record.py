"""The rank-record format every bench program writes: one JSON line per record.

Each rank appends its records to `<record_dir>/rank-<rank>.jsonl`; the launcher
reads them back. A record is a flat JSON object with `schema_version`, `kind`
and `rank`; the rest depends on the kind (`train`, `allreduce`, `halo`, `error`).
Every record carries the rank's own CPU time (`cpu_seconds`: user + system of its process, what
getrusage(RUSAGE_SELF) counts) as it was written, and `program_start_cpu_seconds` beside
`program_start_unix`: the disturbance judge counts the rank's CPU between its edges as the
run's own, whether or not a sampler's look ever saw the process (launch.disturbance.judge).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Callable, Iterator

RECORD_SCHEMA_VERSION = 1
# When this rank's Python began running bench code (bench programs import this
# module before any framework): the end of the launcher's start-up overhead.
PROGRAM_START_UNIX = time.time()
PROGRAM_START_CPU_SECONDS = time.process_time()  # this process's user + system CPU then


def record_path(record_dir: str | os.PathLike, rank: int) -> Path:
    return Path(record_dir) / f"rank-{rank}.jsonl"


def slurm_step() -> dict:
    """The Slurm job and step a rank runs in, when Slurm started it."""
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    return {"slurm_step": f"{job}.{step}"} if job and step else {}


def write_record(record_dir: str | os.PathLike, rank: int, kind: str, **fields: object) -> dict:
    record = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "kind": kind,
        "rank": rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time_unix": time.time(),
        "program_start_unix": PROGRAM_START_UNIX,
        "cpu_seconds": round(time.process_time(), 6),
        "program_start_cpu_seconds": round(PROGRAM_START_CPU_SECONDS, 6),
        **slurm_step(),
        **fields,
    }
    path = record_path(record_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
    return record


@contextlib.contextmanager
def errors_recorded(record_dir: str | os.PathLike, rank: int | Callable[[], int]) -> Iterator[None]:
    """Write an `error` record for an exception escaping the block, then re-raise:
    the launcher reports it as the run's failure. `rank` may be a callable for
    programs that learn their rank only from the failing communicator."""
    try:
        yield
    except Exception as exc:
        write_record(
            record_dir,
            rank() if callable(rank) else rank,
            "error",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc()[-4000:],
        )
        raise


def read_records(record_dir: str | os.PathLike) -> list[dict]:
    """All records of all ranks, ordered by rank then by time of writing.

    A truncated last line (a rank killed mid-write) is skipped, not fatal.
    """
    records = []
    for path in sorted(Path(record_dir).glob("rank-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("schema_version") == RECORD_SCHEMA_VERSION:
                records.append(record)
    return sorted(records, key=lambda r: (r.get("rank", -1), r.get("time_unix", 0)))
