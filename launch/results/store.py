"""Results history: a SQLite index of every result.json (stdlib sqlite3).

The JSON files stay the truth; the index holds the fields people filter and
sort on plus the whole result, and can be rebuilt from a tree at any time.
Its path: $FABRIC_BENCH_STORE, else ~/.cache/fabric-bench/results.sqlite.
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from launch.errors import UsageError
from launch.results.result import read_tree

COLUMNS = {  # column -> how to read it from a result
    "run_id": lambda r: r.get("run_id"),
    "benchmark": lambda r: r.get("benchmark"),
    "framework": lambda r: r.get("framework"),
    "engine": lambda r: r.get("engine"),
    "model": lambda r: r.get("model"),
    "fabric": lambda r: (r.get("spec") or {}).get("fabric"),
    "world_size": lambda r: r.get("world_size"),
    "nodes": lambda r: (r.get("spec") or {}).get("nodes"),
    "gpus_per_node": lambda r: (r.get("spec") or {}).get("gpus_per_node"),
    "launcher": lambda r: (r.get("launch") or {}).get("launcher"),
    "runtime": lambda r: (r.get("launch") or {}).get("runtime"),
    "status": lambda r: r.get("status"),
    "total_img_per_s": lambda r: (r.get("throughput") or {}).get("total_img_per_s"),
    "ci95_img_per_s": lambda r: (r.get("throughput") or {}).get("ci95_img_per_s"),
    # one rank communicates nothing: no share (launch.results.aggregate's rule, as report and sweep summary show it)
    "comm_fraction": lambda r: r.get("comm_fraction") if (r.get("world_size") or 0) > 1 else None,
    "transport": lambda r: (r.get("transport") or {}).get("verdict"),
    "image_digest": lambda r: (r.get("image") or {}).get("digest"),
    "replay_of": lambda r: (r.get("replay_of") or {}).get("run_id"),
}
FILTERS = ("benchmark", "framework", "engine", "model", "fabric", "world_size", "status", "transport")


def store_path() -> Path:
    return Path(os.environ.get("FABRIC_BENCH_STORE") or Path.home() / ".cache/fabric-bench/results.sqlite")


def connect(path: Path | None = None) -> sqlite3.Connection:
    path = Path(path or store_path())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=30)
        columns = ", ".join(f"{c} {'TEXT PRIMARY KEY' if c == 'run_id' else ''}" for c in COLUMNS)
        db.execute(f"CREATE TABLE IF NOT EXISTS results ({columns}, path TEXT, indexed_unix REAL, result TEXT)")
    except sqlite3.Error as exc:
        raise UsageError(f"results store {path}: {exc}") from None
    db.row_factory = sqlite3.Row
    return db


def index_result(db: sqlite3.Connection, path: Path, result: dict) -> None:
    values = [read(result) for read in COLUMNS.values()]
    values += [str(Path(path).resolve()), time.time(), json.dumps(result, sort_keys=True)]
    marks = ", ".join("?" * len(values))
    db.execute(f"INSERT OR REPLACE INTO results ({', '.join(COLUMNS)}, path, indexed_unix, result) "
               f"VALUES ({marks})", values)


def index_quietly(path: Path, result: dict) -> None:
    """Index a result as it is written; a broken store warns, never fails the run."""
    try:
        with connect() as db:
            index_result(db, path, result)
    except (UsageError, sqlite3.Error, OSError) as exc:
        print(f"fabric-bench: warning: result not indexed: {exc}", file=sys.stderr)


def index_tree(root: Path, db: sqlite3.Connection | None = None) -> tuple[int, list[str]]:
    """(Re)index every result.json under root; returns (indexed, problems)."""
    if not Path(root).is_dir():
        raise UsageError(f"{root} is not a directory")
    db = db or connect()
    count, problems = 0, []
    with db:
        results, problems = read_tree([root])
        for result in results:
            index_result(db, result.path, result)
            count += 1
    return count, problems


def query(db: sqlite3.Connection, limit: int | None = None, **filters) -> list[sqlite3.Row]:
    """Rows matching every given filter (None: any), newest run first."""
    where, args = [], []
    for name, value in filters.items():
        if name not in FILTERS:
            raise UsageError(f"unknown filter {name!r}; choose from {', '.join(FILTERS)}")
        if value is not None:
            where.append(f"{name} = ?")
            args.append(value)
    sql = "SELECT * FROM results" + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY run_id DESC" + (f" LIMIT {int(limit)}" if limit else "")
    return db.execute(sql, args).fetchall()


def get(db: sqlite3.Connection, run_id: str) -> dict:
    """One result by run id, or by a unique prefix of it."""
    rows = db.execute("SELECT result FROM results WHERE run_id LIKE ? ORDER BY run_id",
                      (run_id.replace("%", r"\%") + "%",)).fetchall()
    exact = [r for r in rows if json.loads(r["result"])["run_id"] == run_id]
    if exact:
        return json.loads(exact[0]["result"])
    if len(rows) != 1:
        raise UsageError(f"no result {run_id!r} in the store" if not rows
                         else f"{run_id!r} matches {len(rows)} results; give more of the run id")
    return json.loads(rows[0]["result"])
