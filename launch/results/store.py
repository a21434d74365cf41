"""Results history: a SQLite index of every result.json (stdlib sqlite3).

The JSON files stay the truth; the index holds the fields people filter and
sort on plus the whole result, and can be rebuilt from a tree at any time.
A row is keyed by run id, origin (the host and bundle commit that wrote it,
`origin_of`) AND the result file's path: another site's result that reuses a local
run id is kept beside the local one, and so is a second folder of results whose run
ids and origin are the same (older results without an `origin` field, copies of one
run edited apart): a row is never replaced by another file's result, and every
collision is reported. Indexing the same file again updates its own row; a row whose
file is gone is dropped when the same result is indexed from where it moved to.
Its path: $FABRIC_BENCH_STORE, else ~/.cache/fabric-bench/results.sqlite.

Several writers at once (a site's nightly jobs side by side) keep it whole: every write is one
IMMEDIATE transaction (the write lock taken before the row is read, so the collision check and
the write are one step) and a writer waits up to BUSY_SECONDS for another's; a column added
since is added under that lock, checked again there. The journal stays SQLite's default
(rollback): WAL would let readers run beside a writer but needs shared memory, which a store on
a network file system (a cluster's home) does not give.

Each row also holds its run's verdict against this site's baseline (`baseline_verdict`, one of
BASELINE_VERDICTS; launch.analysis.baseline), read from the BASELINE_FILE beside the result
whenever the result is indexed, so a rebuilt index has it too.

And the site it was pulled from (`pulled_from`: the site that signed it, as `results pull` verified
it; '' for a result written here): a pulled result speaks for its signer, whatever origin it names,
and never counts as this site's run (issue 64, C-7). A pulled result lives under PULLED_FOLDER beside
the store (launch.sharing.pulled's layout), so a row indexed without a site (a rebuilt index, a
store from before the column, a row an older bundle wrote) takes the site its folder's record
names, and a row once pulled stays pulled when indexed again. A pulled row has no baseline verdict:
the BASELINE_FILE beside it is its own site's.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from launch.errors import UsageError
from launch.results.result import Result, as_result, read_tree, typed
from launch.schema import INDEXED, field_at

# column -> how to read it from a result: the schema's indexed fields (launch.schema.INDEXED)
COLUMNS: dict[str, Callable[[dict], Any]] = {column: partial(field_at, path=path) for column, path in INDEXED.items()}


def comm_share(result: dict) -> object:
    """One rank communicates nothing: no share (launch.analysis.aggregate's rule, as report and
    sweep summary show it). A column: it reads the mapping as stored, as every column does."""
    return field_at(result, path=INDEXED["comm_fraction"]) if (as_result(result).world_size or 0) > 1 else None


COLUMNS["comm_fraction"] = comm_share


def origin_of(result: Result) -> str:
    """'host@commit' of the result's `origin` field; results from before it: their ranks' hosts."""
    fields = typed(result)
    origin = fields.origin if fields is not None else None
    if isinstance(origin, dict) and isinstance(origin.get("host"), str):
        return f"{origin['host']}@{origin.get('bundle_commit')}"
    names = sorted(fields.hosts or []) if fields is not None else []
    return ",".join(names) + "@unknown" if names else "unknown"


BASELINE_FILE = "baseline.json"  # beside result.json: the run's verdict (launch.analysis.baseline)
PULLED_FOLDER = "pulled"  # beside the store: the archives `results pull` imported (launch.sharing.pulled)
PULLED_RECORD = "pulled.json"  # in each of its folders: the record, naming the site that signed it
UNRECORDED_SITE = "(a site not recorded)"  # a row under PULLED_FOLDER whose folder's record names none
BASELINE_VERDICTS = ("normal", "slow", "fast", "no baseline yet", "disturbed")
BUSY_SECONDS = 60.0

FILTERS = ("benchmark", "framework", "engine", "model", "fabric", "world_size", "status", "transport", "disturbance")


def store_path() -> Path:
    return Path(os.environ.get("FABRIC_BENCH_STORE") or Path.home() / ".cache/fabric-bench/results.sqlite")


def connect(path: Path | None = None) -> sqlite3.Connection:
    path = Path(path or store_path())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_SECONDS)
        db.row_factory = sqlite3.Row
        if _outdated(db):  # checked again under the write lock: another writer may have done it meanwhile
            with db:
                db.execute("BEGIN IMMEDIATE")
                if _outdated(db):
                    _update(db)
    except sqlite3.Error as exc:
        raise UsageError(f"results store {path}: {exc}") from None
    return db


KEY = "PRIMARY KEY (run_id, origin, path)"
# columns not read from the result: its verdict (from BASELINE_FILE) and the site it was pulled from
MORE = ("baseline_verdict", "pulled_from")


def _table(db: sqlite3.Connection) -> sqlite3.Row | None:
    return db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'results'").fetchone()


def _outdated(db: sqlite3.Connection) -> bool:
    """No table yet, one keyed otherwise, or one without a column added since."""
    table = _table(db)
    present = {row[1] for row in db.execute("PRAGMA table_info(results)")}
    return table is None or KEY not in table[0] or not {*COLUMNS, *MORE} <= present


def _update(db: sqlite3.Connection) -> None:
    table = _table(db)
    if table and KEY not in table[0]:  # a store keyed otherwise (before origins, before paths): rebuilt
        db.execute("ALTER TABLE results RENAME TO results_before_key")
        _create(db)
        for row in db.execute("SELECT path, result FROM results_before_key").fetchall():
            index_result(db, Path(row["path"]), Result(json.loads(row["result"])))
        db.execute("DROP TABLE results_before_key")
    _create(db)
    present = {row[1] for row in db.execute("PRAGMA table_info(results)")}
    for column in [c for c in (*COLUMNS, *MORE) if c not in present]:  # a column added since (e.g. disturbance)
        db.execute(f"ALTER TABLE results ADD COLUMN {column}")
    if "pulled_from" not in present:  # a store from before it: its rows' sites from where their files lie
        folder, sites = store_folder(db), dict[Path, str]()
        for row in db.execute("SELECT rowid, path FROM results").fetchall():
            site = pulled_site_of_path(folder, Path(row["path"]), sites)
            db.execute(
                "UPDATE results SET pulled_from = ?, baseline_verdict = CASE WHEN ? = '' THEN baseline_verdict END "
                "WHERE rowid = ?",
                (site, site, row["rowid"]),
            )


def _create(db: sqlite3.Connection) -> None:
    columns = ", ".join(f"{c} TEXT" if c == "run_id" else c for c in (*COLUMNS, *MORE))
    db.execute(
        f"CREATE TABLE IF NOT EXISTS results ({columns}, origin TEXT, path TEXT, indexed_unix REAL, result TEXT, {KEY})"
    )


def store_folder(db: sqlite3.Connection) -> Path | None:
    """The folder of the store's file (None: a store in memory)."""
    found = next((row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main"), "")
    return Path(found).resolve().parent if found else None


def pulled_site_of_path(folder: Path | None, path: Path, read: dict[Path, str] | None = None) -> str:
    """'' where `path` does not lie under the PULLED_FOLDER beside the store in `folder`; else the
    site its archive folder's PULLED_RECORD names (UNRECORDED_SITE where it names none: an import
    that did not finish). `read`: the sites of folders read already."""
    from containers.untrusted import UntrustedInput, read_json

    if folder is None:
        return ""
    root, where = (Path(folder) / PULLED_FOLDER).resolve(), Path(path).resolve()
    if root not in where.parents:
        return ""
    archive = root / where.relative_to(root).parts[0]
    if read is not None and archive in read:
        return read[archive]
    try:
        record = read_json(archive / PULLED_RECORD, 4 * 2**20, "pulled record")
    except UntrustedInput:
        record = None
    site = record.get("site") if isinstance(record, dict) else None
    found = site if isinstance(site, str) and site.isprintable() and 0 < len(site) <= 200 else UNRECORDED_SITE
    if read is not None:
        read[archive] = found
    return found


def pulled_from(db: sqlite3.Connection, row: sqlite3.Row) -> str:
    """The site a row was pulled from ('': written here); a row without one (an older bundle wrote
    it into this store): from where its file lies."""
    site = row["pulled_from"]
    return str(site) if site is not None else pulled_site_of_path(store_folder(db), Path(row["path"]))


def verdict_beside(path: Path) -> str | None:
    """The baseline verdict in the BASELINE_FILE beside a result file (None: none, or not one
    of BASELINE_VERDICTS: a file from elsewhere is read within bounds and its word checked)."""
    from containers.untrusted import UntrustedInput, read_json

    beside = Path(path).parent / BASELINE_FILE
    if not beside.is_file():
        return None
    try:
        found = read_json(beside, 2**20, "baseline verdict")
    except UntrustedInput:
        return None
    verdict = found.get("verdict") if isinstance(found, dict) else None
    return verdict if verdict in BASELINE_VERDICTS else None


def record_verdict(db: sqlite3.Connection, path: Path, verdict: str) -> None:
    """A run's baseline verdict into its row (the row of the result file at `path`)."""
    if verdict not in BASELINE_VERDICTS:
        raise UsageError(f"baseline verdict {verdict!r} is not one of {', '.join(BASELINE_VERDICTS)}")
    with db:
        if not db.in_transaction:
            db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE results SET baseline_verdict = ? WHERE path = ?", (verdict, str(Path(path).resolve())))


def index_result(db: sqlite3.Connection, path: Path, result: Result, pulled_from: str | None = None) -> str | None:
    """Index (or re-index) one result file; a line when its run id is also held from another
    origin or from another file of the same origin (both rows are kept). The row keeps the raw
    mapping (`result`, as the file holds it) and its columns read it by their paths (INDEXED).
    `pulled_from`: the site that signed it (`results pull`); None: the site its row had, else the
    one its place under PULLED_FOLDER says ('': written here)."""
    origin, where, run_id = origin_of(result), str(Path(path).resolve()), result.run_id
    text = json.dumps(result, sort_keys=True)
    if not db.in_transaction:  # the write lock first: the collision check and the write are one step
        db.execute("BEGIN IMMEDIATE")
    if pulled_from is None:
        held = db.execute(
            "SELECT pulled_from FROM results WHERE run_id = ? AND origin = ? AND path = ?", (run_id, origin, where)
        ).fetchone()
        pulled_from = (held[0] if held else None) or pulled_site_of_path(store_folder(db), Path(where))
    others = db.execute(
        "SELECT origin, path, result, pulled_from FROM results WHERE run_id = ? AND NOT (origin = ? AND path = ?)",
        (run_id, origin, where),
    ).fetchall()
    kept = []
    for other in others:
        if other["origin"] == origin and other["result"] == text and not Path(other["path"]).exists():
            # the same result, moved: its old row names a file that is gone (a pulled one stays pulled)
            pulled_from = pulled_from or other["pulled_from"] or ""
            db.execute(
                "DELETE FROM results WHERE run_id = ? AND origin = ? AND path = ?",
                (run_id, origin, other["path"]),
            )
        else:
            kept.append(other)
    verdict = None if pulled_from else verdict_beside(path)  # a pulled run's verdict is its own site's
    values = [read(result) for read in COLUMNS.values()] + [verdict, pulled_from, origin, where, time.time(), text]
    marks = ", ".join("?" * len(values))
    db.execute(
        f"INSERT OR REPLACE INTO results ({', '.join((*COLUMNS, *MORE))}, origin, path, indexed_unix, result) "
        f"VALUES ({marks})",
        values,
    )
    foreign = sorted({o["origin"] for o in kept if o["origin"] != origin})
    if foreign:
        return f"run id {run_id} from {origin} is also held from {', '.join(foreign)}: both are kept"
    if kept:
        return (
            f"run id {run_id} from {origin} is also held from the same origin in "
            f"{', '.join(sorted(o['path'] for o in kept))}: both are kept"
        )
    return None


def index_quietly(path: Path, result: Result) -> None:
    """Index a result as it is written; a broken store warns, never fails the run."""
    try:
        with connect() as db:
            collision = index_result(db, path, result)
        if collision:
            print(f"fabric-bench: warning: {collision}", file=sys.stderr)
    except (UsageError, sqlite3.Error, OSError) as exc:
        print(f"fabric-bench: warning: result not indexed: {exc}", file=sys.stderr)


def index_tree(root: Path, db: sqlite3.Connection | None = None) -> tuple[int, list[str]]:
    """(Re)index every result.json under root; returns (indexed, lines: the files that are not results
    and the run ids held more than once)."""
    if not Path(root).is_dir():
        raise UsageError(f"{root} is not a directory")
    db = db or connect()
    count = 0
    with db:
        results, problems = read_tree([root])  # each unreadable file's line says it is not a result
        for result in results:
            assert result.path is not None, "read_tree's results carry their path"
            collision = index_result(db, result.path, result)
            if collision:
                problems.append(collision)
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
    rows = db.execute(
        "SELECT result, origin, path FROM results WHERE run_id LIKE ? ORDER BY run_id",
        (run_id.replace("%", r"\%") + "%",),
    ).fetchall()
    exact = [r for r in rows if json.loads(r["result"])["run_id"] == run_id]
    origins = sorted({r["origin"] for r in exact})
    if len(origins) > 1:
        raise UsageError(
            f"run id {run_id!r} is held from {len(origins)} origins "
            f"({', '.join(origins)}); its result files tell them apart"
        )
    if len(exact) > 1:
        raise UsageError(
            f"run id {run_id!r} is held {len(exact)} times from {origins[0]} "
            f"({', '.join(sorted(r['path'] for r in exact))}); read one of those files"
        )
    if exact:
        return json.loads(exact[0]["result"])
    if len(rows) != 1:
        raise UsageError(
            f"no result {run_id!r} in the store"
            if not rows
            else f"{run_id!r} matches {len(rows)} results; give more of the run id"
        )
    return json.loads(rows[0]["result"])
