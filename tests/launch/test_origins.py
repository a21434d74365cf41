"""Whose runs count here (launch.results.origins; issue 64, C-7: results speak only for their
signer): a result pulled from another site that claims this site's origin is refused at pull, and
whatever the store holds from other sites never reaches this site's baseline, metrics or the
verdict after a run, unless `--any-origin` asks for it, and then labelled with its signing site.

The histories are copies of the RECORDED real run the baseline tests use (tests/data/baseline)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from launch.analysis import baseline, metrics
from launch.errors import UsageError
from launch.results import origins, store
from launch.results.result import Result, read
from tests.conftest import fabric_bench
from tests.launch.test_baseline import HOST, copy_of, run_id, write

FOREIGN = "20991231T000000-allreduce-mpi-n2-b0b0b0"  # site B's result, claiming this host, in 2099
LOCAL_SPEEDS = [1.00, 0.97, 1.03, 0.99, 1.02, 1.00]


def pulled_from_site_b(store_folder: Path, results: list[dict]) -> list[Path]:
    """Site B's results as `results pull` lays them out beside the store (launch.sharing.pulled:
    pulled/<archive digest>/results/..., its record naming the site), indexed as pulled from it."""
    archive = store_folder / store.PULLED_FOLDER / ("b" * 64)
    write(archive / "results", results)
    (archive / store.PULLED_RECORD).write_text(json.dumps({"record_version": 1, "site": "site-b"}))
    paths = [archive / "results" / r["run_id"] / "result.json" for r in results]
    with store.connect(store_folder / "store.sqlite") as db:
        for path, result in zip(paths, results):
            store.index_result(db, path, Result(result), pulled_from="site-b")
    return paths


def test_c7_a_pulled_result_claiming_this_host_never_reaches_baseline_metrics_or_verdict(tmp_path, monkeypatch):
    """Six runs written here; site B's seven, each claiming this site's origin host, the newest in
    2099 and a third as fast. `baseline` (and its metrics) and the verdict after a new run read the
    six alone, also after the index is rebuilt from the files; `--any-origin` judges site B's 2099
    run slow, and says it was pulled from site-b in the words and the metrics."""
    folder = tmp_path / "store"
    env = {**os.environ, "FABRIC_BENCH_STORE": str(folder / "store.sqlite"), origins.ORIGINS_ENV: HOST}
    env.pop(metrics.METRICS_ENV, None)
    for name in ("FABRIC_BENCH_STORE", origins.ORIGINS_ENV):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv(metrics.METRICS_ENV, str(tmp_path / "metrics-after-run"))
    local = [copy_of(run_id(i), s) for i, s in enumerate(LOCAL_SPEEDS)]
    store.index_tree(write(tmp_path / "runs", local), store.connect())
    foreign = [copy_of(run_id(10 + i), 1.0, host=HOST) for i in range(6)] + [copy_of(FOREIGN, 0.3, host=HOST)]
    pulled_from_site_b(folder, foreign)
    with store.connect() as db:  # the index rebuilt from the files: site B's rows stay pulled (their folder says so)
        db.execute("DELETE FROM results")
    store.index_tree(folder)
    store.index_tree(tmp_path / "runs")
    rows = dict(store.connect().execute("SELECT run_id, pulled_from FROM results").fetchall())
    assert rows == {**{r["run_id"]: "" for r in local}, **{r["run_id"]: "site-b" for r in foreign}}

    shown = fabric_bench("baseline", "--json", "--metrics-dir", str(tmp_path / "m"), env=env)
    assert shown.returncode == 0, shown.stderr
    [record] = json.loads(shown.stdout)
    assert record["run_id"] == run_id(5) and record["verdict"] == "normal", record["words"]
    assert record["baseline"]["run_ids"] == [run_id(i) for i in range(5)]
    assert "pulled_from" not in record["run"] and "pulled_from" not in record["baseline"]
    [prom] = (tmp_path / "m").glob("*.prom")
    text = prom.read_text()
    assert f'run_id="{run_id(5)}"' in text and 'verdict="normal"} 1.0' in text
    assert FOREIGN not in text and "pulled_from" not in text

    newest = copy_of(run_id(6), 1.0)  # the verdict after a run (what launch.runs.run does once it is written)
    write(tmp_path / "runs", [newest])
    run_dir = tmp_path / "runs" / run_id(6)
    store.index_quietly(run_dir / "result.json", read(run_dir / "result.json"))
    verdict = baseline.after_run(run_dir, read(run_dir / "result.json"), echo=False)
    assert verdict is not None and verdict.verdict == "normal"
    assert list(verdict.baseline.run_ids) == [run_id(i) for i in range(6)]
    beside = json.loads((run_dir / store.BASELINE_FILE).read_text())
    assert beside["baseline"]["run_ids"] == [run_id(i) for i in range(6)] and "pulled_from" not in beside["run"]
    [after] = (tmp_path / "metrics-after-run").glob("*.prom")
    assert f'run_id="{run_id(6)}"' in after.read_text() and FOREIGN not in after.read_text()

    anywhere = fabric_bench("baseline", "--any-origin", "--metrics-dir", str(tmp_path / "any"), env=env)
    assert anywhere.returncode == 0, anywhere.stderr
    said = anywhere.stdout
    assert f"run {FOREIGN}: " in said and ": slow: " in said and "; the run was pulled from site-b" in said, said
    assert "14 runs, 14 clean, 7 pulled from site-b" in said, said
    assert "of them pulled from site-b" in said, said
    [labelled] = (tmp_path / "any").glob("*.prom")
    assert f'run_id="{FOREIGN}"' in labelled.read_text() and 'pulled_from="site-b"' in labelled.read_text()


def test_c7_the_pull_refuses_a_result_that_claims_this_host(monkeypatch):
    """refuse_claimed_origin, which `results pull` calls before it imports: a result signed by
    site-b that names this host (or a host matching $FABRIC_BENCH_ORIGINS, in any case) is refused
    in one line naming the host; one naming site B's own host passes."""
    monkeypatch.delenv(origins.ORIGINS_ENV, raising=False)
    here = socket.gethostname()
    claims = {"results/x/result.json": Result(copy_of(FOREIGN, 1.0, host=here))}
    with pytest.raises(UsageError) as refused:
        origins.refuse_claimed_origin(claims, "site-b")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("results/x/result.json: a result signed by site site-b claims")
    assert f"this site's origin host {here!r}" in line and line.endswith(": refused")
    origins.refuse_claimed_origin({"results/x/result.json": Result(copy_of(FOREIGN, 1.0, host="host-b"))}, "site-b")
    monkeypatch.setenv(origins.ORIGINS_ENV, "login*, n[0-9]*")
    with pytest.raises(UsageError, match="'LOGIN3'.*'login\\*'"):
        origins.refuse_claimed_origin({"r": Result(copy_of(FOREIGN, 1.0, host="LOGIN3"))}, "site-b")
    origins.refuse_claimed_origin({"r": Result(copy_of(FOREIGN, 1.0, host=here))}, "site-b")  # not ours now


def test_a_store_from_before_pulled_from_opens_with_its_pulled_rows_marked(tmp_path):
    """A store without the column: opened, its rows under pulled/ take the site their folder's record
    names (and lose the verdict beside them, which is their own site's), the others stay this site's."""
    path = tmp_path / "results.sqlite"
    old = [c for c in (*store.COLUMNS, *store.MORE) if c != "pulled_from"]
    local = copy_of(run_id(1), 1.0)
    write(tmp_path / "runs", [local])
    archive = tmp_path / store.PULLED_FOLDER / ("c" * 64)
    theirs = copy_of(run_id(2), 1.0, host=HOST)
    write(archive / "results", [theirs])
    (archive / store.PULLED_RECORD).write_text(json.dumps({"site": "site-b"}))
    with sqlite3.connect(path) as db:
        columns = ", ".join(f"{c} TEXT" if c == "run_id" else c for c in old)
        db.execute(
            f"CREATE TABLE results ({columns}, origin TEXT, path TEXT, indexed_unix REAL, result TEXT, {store.KEY})"
        )
        for result, where in ((local, tmp_path / "runs"), (theirs, archive / "results")):
            values = {c: None for c in old} | {"run_id": result["run_id"], "status": "ok", "baseline_verdict": "slow"}
            db.execute(
                f"INSERT INTO results ({', '.join(old)}, origin, path, result) VALUES ({', '.join('?' * (len(old) + 3))})",
                [
                    *values.values(),
                    f"{HOST}@x",
                    str((where / result["run_id"] / "result.json").resolve()),
                    json.dumps(result),
                ],
            )
    db = store.connect(path)
    rows = {r["run_id"]: (r["pulled_from"], r["baseline_verdict"]) for r in db.execute("SELECT * FROM results")}
    assert rows == {run_id(1): ("", "slow"), run_id(2): ("site-b", None)}
    assert [r.run_id for r in baseline.load(db, [HOST])] == [run_id(1)]
    assert [(r.run_id, r.pulled_from) for r in baseline.load(db, None)] == [(run_id(1), ""), (run_id(2), "site-b")]
