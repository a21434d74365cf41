"""Another site's results are numbers to check, not to believe: compare recomputes them, the
store never lets them replace a local run, the report renders them as text (issue 28)."""

import json

import pytest

from launch.results import store
from tests.conftest import fabric_bench
from tests.results import train_result
from tests.security.conftest import hostile_result


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("claimed", [1e300, "Infinity", "NaN", "wide"])
def test_a_claimed_interval_cannot_make_a_slow_candidate_pass_the_gate(tmp_path, claimed):
    """A reference claiming ci95 = 1e300 (or Infinity) made any candidate 'within' (exit 0)."""
    reference = hostile_result()
    reference["throughput"]["ci95_img_per_s"] = claimed
    text = json.dumps(reference).replace('"Infinity"', "Infinity").replace('"NaN"', "NaN")
    a = write(tmp_path / "a" / "result.json", text)
    slow = hostile_result(run_id="slow")
    slow["samples"]["total_img_per_s"] = [4.9, 5.0, 5.1]
    slow["throughput"] = {"total_img_per_s": 5.0, "ci95_img_per_s": 0.2484}
    b = write(tmp_path / "b" / "result.json", slow)
    proc = fabric_bench("compare", str(a), str(b), "--json")
    if claimed == "wide":  # a string where a number belongs: one line, exit 2
        assert proc.returncode == 2 and "throughput.ci95_img_per_s is not a number" in proc.stderr
        assert proc.stderr.count("\n") == 1
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    total = next(m for m in data["metrics"] if m["metric"] == "total_img_per_s")
    assert total["within"] is False and total["ci95_a"] == pytest.approx(2.484, rel=1e-3)
    if claimed != "NaN":
        assert any("is not what its samples give" in f for f in data["failures"])


def test_an_edited_mean_is_flagged_beside_its_samples(tmp_path):
    edited = hostile_result()
    edited["throughput"]["total_img_per_s"] = 50.0  # the samples say 10
    a = write(tmp_path / "a" / "result.json", hostile_result())
    b = write(tmp_path / "b" / "result.json", edited)
    proc = fabric_bench("compare", str(a), str(b), "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert any("throughput.total_img_per_s 50.0 is not what its samples give (10)" in f for f in data["failures"])
    assert next(m for m in data["metrics"] if m["metric"] == "total_img_per_s")["b"] == pytest.approx(10.0)


def test_a_foreign_result_with_a_local_run_id_is_kept_beside_it(tmp_path):
    local = train_result("run-1", img=10.0, origin={"host": "here", "bundle_commit": "abc"})
    foreign = train_result("run-1", img=99.0, origin={"host": "elsewhere", "bundle_commit": "def"})
    write(tmp_path / "local" / "run-1" / "result.json", local)
    write(tmp_path / "foreign" / "run-1" / "result.json", foreign)
    db = store.connect(tmp_path / "store.sqlite")
    assert store.index_tree(tmp_path / "local", db) == (1, [])
    count, problems = store.index_tree(tmp_path / "foreign", db)
    assert count == 1 and problems == ["run id run-1 from elsewhere@def is also held from here@abc: both are kept"]
    rows = db.execute("SELECT origin, total_img_per_s FROM results WHERE run_id = 'run-1' ORDER BY origin").fetchall()
    assert [tuple(r) for r in rows] == [("elsewhere@def", 99.0), ("here@abc", 10.0)]
    with pytest.raises(Exception, match="held from 2 origins"):
        store.get(db, "run-1")
    # the same result indexed again is the same row (the collision is still named)
    assert store.index_tree(tmp_path / "local", db)[0] == 1
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2


def test_a_store_from_before_origins_is_migrated_with_its_rows(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    columns = ", ".join(f"{c} {'TEXT PRIMARY KEY' if c == 'run_id' else ''}" for c in store.COLUMNS)
    old.execute(f"CREATE TABLE results ({columns}, path TEXT, indexed_unix REAL, result TEXT)")
    result = train_result("old-run", img=7.0)
    old.execute("INSERT INTO results (run_id, path, result) VALUES (?, ?, ?)", ("old-run", "/x", json.dumps(result)))
    old.commit()
    old.close()
    db = store.connect(path)
    assert store.get(db, "old-run")["run_id"] == "old-run"
    assert "origin" in [row[1] for row in db.execute("PRAGMA table_info(results)")]


@pytest.mark.parametrize(
    "field, value, why",
    [
        ("engine", 5, "engine is not text"),
        ("samples", {"total_img_per_s": []}, "samples.total_img_per_s is not a non-empty list"),
        ("world_size", "2", "world_size is not a positive integer"),
        ("hosts", [1], "hosts is not a list of names"),
        # a valid JSON integer that no float holds: it raised OverflowError (a traceback) in every reader
        ("throughput", {"total_img_per_s": 10**400}, "throughput.total_img_per_s: Input should be a valid number"),
        ("samples", {"total_img_per_s": [10**400]}, "samples.total_img_per_s is not a non-empty list"),
    ],
)
def test_the_report_skips_a_malformed_result_with_one_line_and_renders_the_rest(tmp_path, field, value, why):
    good = train_result("good", img=10.0, ranks=1, model="$\\frac{a}{b}$", spec={"batch_size": 8})
    bad = {**train_result("bad", img=10.0), field: value}
    write(tmp_path / "runs" / "good" / "result.json", good)
    write(tmp_path / "runs" / "bad" / "result.json", bad)
    proc = fabric_bench("report", str(tmp_path / "runs"), "--output", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if "left out of the report" in line]
    assert len(warnings) == 1 and why in warnings[0] and "bad" in warnings[0]
    html = (tmp_path / "report" / "report.html").read_text()
    assert "$\\frac{a}{b}$" in html  # the name, as text
