"""The SQLite results history and `fabric-bench results`."""

import csv
import io
import json
import os
from pathlib import Path

import pytest

from launch.results import store
from launch.results.result import Result
from launch.errors import UsageError
from tests.conftest import fabric_bench
from tests.results import train_result


def result(run_id, fabric="ethernet", engine="horovod", ranks=2, status="ok", img=100.0):
    return train_result(
        run_id,
        img=img,
        ranks=ranks,
        fabric=fabric,
        engine=engine,
        status=status,
        ci=5.0,
        spec={"nodes": 1, "gpus_per_node": 0},
        transport={"verdict": "match"},
        launch={"launcher": "local", "runtime": "host"},
    )


@pytest.fixture
def tree(tmp_path):
    for r in (
        result("20260101T000000-a"),
        result("20260102T000000-b", fabric="infiniband", ranks=4),
        result("20260103T000000-c", engine="ddp", status="failed", img=None),
    ):
        (tmp_path / "runs" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "runs" / r["run_id"] / "result.json").write_text(json.dumps(r))
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "result.json").write_text("{not json")
    return tmp_path


def test_index_query_and_get(tree, tmp_path):
    db = store.connect(tmp_path / "s.sqlite")
    count, problems = store.index_tree(tree / "runs", db)
    assert count == 3 and len(problems) == 1 and "broken" in problems[0]
    assert [r["run_id"] for r in store.query(db)] == ["20260103T000000-c", "20260102T000000-b", "20260101T000000-a"]
    assert [r["run_id"] for r in store.query(db, fabric="infiniband")] == ["20260102T000000-b"]
    assert [r["run_id"] for r in store.query(db, engine="horovod", world_size=2)] == ["20260101T000000-a"]
    assert store.get(db, "20260102")["spec"]["fabric"] == "infiniband"
    with pytest.raises(UsageError, match="matches 3 results"):
        store.get(db, "2026")
    # reindexing replaces, never duplicates
    store.index_tree(tree / "runs", db)
    assert len(store.query(db)) == 3


def test_results_cli_list_show_export_index(tree, tmp_path):
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "cli.sqlite")}
    indexed = fabric_bench("results", "index", str(tree / "runs"), env=env)
    assert indexed.returncode == 0 and "indexed 3 results" in indexed.stdout
    listed = fabric_bench("results", "list", "--status", "ok", "--json", env=env)
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["20260102T000000-b", "20260101T000000-a"]
    shown = fabric_bench("results", "show", "20260101T000000-a", env=env)
    assert json.loads(shown.stdout)["throughput"]["total_img_per_s"] == 100.0
    exported = fabric_bench("results", "export", "--csv", "--fabric", "ethernet", env=env)
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert [r["run_id"] for r in rows] == ["20260103T000000-c", "20260101T000000-a"]
    assert rows[1]["total_img_per_s"] == "100.0" and rows[1]["transport"] == "match"
    missing = fabric_bench("results", "show", "nope", env=env)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    bad = fabric_bench("results", "index", str(tmp_path / "absent"), env=env)
    assert bad.returncode == 2 and "is not a directory" in bad.stderr


def test_two_folders_without_origin_sharing_a_run_id_are_both_kept(tmp_path):
    """Older results (no `origin` field) in two folders with the same run id and hosts: `results
    index` keeps both rows and says so in one line each; `results show` names both files."""
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "s.sqlite")}
    first = train_result("run-1", img=10.0, hosts=["node-a"])
    second = train_result("run-1", img=99.0, hosts=["node-a"])
    for folder, data in (("monday", first), ("tuesday", second)):
        (tmp_path / folder / "run-1").mkdir(parents=True)
        (tmp_path / folder / "run-1" / "result.json").write_text(json.dumps(data))
    assert fabric_bench("results", "index", str(tmp_path / "monday"), env=env).returncode == 0
    again = fabric_bench("results", "index", str(tmp_path / "tuesday"), env=env)
    assert again.returncode == 0 and "indexed 1 results" in again.stdout
    assert again.stderr.splitlines() == [
        f"run id run-1 from node-a@unknown is also held from the same origin in "
        f"{(tmp_path / 'monday' / 'run-1' / 'result.json').resolve()}: both are kept"
    ]
    listed = json.loads(fabric_bench("results", "list", "--json", env=env).stdout)
    assert sorted(r["total_img_per_s"] for r in listed) == [10.0, 99.0]
    shown = fabric_bench("results", "show", "run-1", env=env)
    assert shown.returncode == 2 and shown.stderr.count("\n") == 1
    assert "held 2 times from node-a@unknown" in shown.stderr and "tuesday" in shown.stderr
    # indexing a folder again updates its own rows, never adds or replaces another's
    assert fabric_bench("results", "index", str(tmp_path / "monday"), env=env).returncode == 0
    assert len(json.loads(fabric_bench("results", "list", "--json", env=env).stdout)) == 2
    # a folder moved elsewhere: its old row (whose file is gone) gives way to the same result's new one
    (tmp_path / "monday").rename(tmp_path / "archive")
    fabric_bench("results", "index", str(tmp_path / "archive"), env=env)
    paths = sorted(r["path"] for r in json.loads(fabric_bench("results", "list", "--json", env=env).stdout))
    assert [Path(p).parts[-3] for p in paths] == ["archive", "tuesday"]


def test_a_store_keyed_by_run_id_and_origin_is_rekeyed_with_its_rows(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    columns = ", ".join(f"{c} TEXT" if c == "run_id" else c for c in store.COLUMNS)
    old.execute(
        f"CREATE TABLE results ({columns}, origin TEXT, path TEXT, indexed_unix REAL, result TEXT, "
        f"PRIMARY KEY (run_id, origin))"
    )
    old.execute(
        "INSERT INTO results (run_id, origin, path, result) VALUES (?, ?, ?, ?)",
        ("old-run", "unknown", "/x/result.json", json.dumps(train_result("old-run", img=7.0))),
    )
    old.commit()
    old.close()
    db = store.connect(path)
    assert store.get(db, "old-run")["throughput"]["total_img_per_s"] == 7.0
    assert store.KEY in db.execute("SELECT sql FROM sqlite_master WHERE name = 'results'").fetchone()[0]


def test_a_store_from_before_the_disturbance_column_gains_it_and_show_says_not_recorded(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    old_columns = [c for c in store.COLUMNS if c != "disturbance"]
    with sqlite3.connect(path) as old:  # a store as the bundle made it before the disturbance record
        old.execute(
            f"CREATE TABLE results ({', '.join(old_columns)}, origin TEXT, path TEXT, indexed_unix REAL, "
            f"result TEXT, PRIMARY KEY (run_id, origin))"
        )
    db = store.connect(path)
    assert "disturbance" in [row[1] for row in db.execute("PRAGMA table_info(results)")]
    noisy = {
        **result("20260104T000000-d"),
        "schema_version": 3,
        "disturbance": {
            "verdict": "disturbed",
            "causes": [
                {
                    "signal": "memory",
                    "words": "memory pressure: some task waited on memory 9% of the timed window (PSI)",
                }
            ],
        },
    }
    with db:
        store.index_result(db, tmp_path / "d.json", Result(noisy))
        store.index_result(
            db, tmp_path / "a.json", Result(result("20260101T000000-a"))
        )  # a version-1 result, as stored
    assert [r["run_id"] for r in store.query(db, disturbance="disturbed")] == ["20260104T000000-d"]
    env = {**os.environ, "FABRIC_BENCH_STORE": str(path)}
    shown = fabric_bench("results", "show", "20260101T000000-a", env=env)
    assert shown.returncode == 0 and json.loads(shown.stdout)["disturbance"]["verdict"] == "not recorded"
    assert shown.stderr.strip() == "disturbance: not recorded"
    shown = fabric_bench("results", "show", "20260104T000000-d", env=env)
    assert shown.stderr.splitlines() == [
        "disturbance: disturbed: memory",
        "disturbance: memory pressure: some task waited on memory 9% of the timed window (PSI)",
    ]
    listed = fabric_bench("results", "list", env=env)
    assert "disturbed" in listed.stdout
