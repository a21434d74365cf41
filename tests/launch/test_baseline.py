"""Per-site baselines, run verdicts and change points (launch.analysis.baseline, `fabric-bench
baseline`), the verdict's sidecar and store column, and the store under concurrent writers.

The histories are copies of a RECORDED real run (tests/data/baseline, SOURCE.md there): only its
figures (every message size's times and bandwidths, scaled together), its run id's stamp, its
disturbance verdict and, where a test is about them, its stack digest or origin host differ."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.analysis import baseline, metrics, report_tables
from launch.results import store
from launch.results.result import read
from tests.conftest import REPO, fabric_bench

DATA = REPO / "tests" / "data" / "baseline"
RECORDED = json.loads((DATA / "allreduce-mpi-n2.result.json").read_text())
HOST = RECORDED["origin"]["host"]
# 12 runs of one key, about +-12 % apart; the 3 disturbed ones (indices 2, 6, 9) read low
SPEEDS = [1.00, 0.93, 0.62, 0.97, 1.12, 0.90, 0.55, 0.95, 1.10, 0.66, 1.02, 0.98]
DISTURBED = {2, 6, 9}


def copy_of(run_id: str, speed: float, disturbed: bool = False, stack: str | None = None, host: str = HOST) -> dict:
    """The recorded run with its figures scaled by `speed` (times / speed, bandwidths x speed), its
    run id (and the timed window) moved to the run id's stamp and its disturbance verdict set."""
    r = copy.deepcopy(RECORDED)
    r["run_id"] = run_id
    for row in r["sizes"]:
        for part in (row, row.get("out_of_place") or {}):
            for name in ("busbw_gbit_s", "algbw_gbit_s"):
                if name in part:
                    part[name] *= speed
            for name in ("time_us", "ci95_us"):
                if name in part:
                    part[name] /= speed
            if "samples_us" in part:
                part["samples_us"] = [t / speed for t in part["samples_us"]]
    r["peak_busbw_gbit_s"] *= speed
    window = r["disturbance"]["window"]
    start = baseline.when_of(run_id)
    window["start_unix"], window["end_unix"] = start, start + window["seconds"]
    if not disturbed:
        r["disturbance"]["verdict"], r["disturbance"]["causes"] = "clean", []
        r["disturbance"]["signals"]["cpu"]["verdict"] = "clean"
    if stack:
        r["image"] = {"path": "/images/ethernet-cpu.sif", "digest": "sha256:" + stack * 8, "stack_digest": stack}
    r["origin"] = {**r["origin"], "host": host}
    return r


def run_id(n: int, day: int = 1) -> str:
    return f"202611{day:02d}T{n:02d}0000-allreduce-mpi-n2-{n:06x}"


def write(root: Path, results: list[dict]) -> Path:
    for r in results:
        (root / r["run_id"]).mkdir(parents=True)
        (root / r["run_id"] / "result.json").write_text(json.dumps(r))
    return root


def history(thirteenth: float) -> list[dict]:
    runs = [copy_of(run_id(i), s, i in DISTURBED) for i, s in enumerate(SPEEDS)]
    return runs + [copy_of(run_id(12), thirteenth)]


def indexed(tmp_path: Path, results: list[dict]) -> dict:
    """The results written under tmp_path/runs and indexed by the real CLI into a store of their own."""
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite"), baseline.ORIGINS_ENV: HOST}
    env.pop(metrics.METRICS_ENV, None)
    done = fabric_bench("results", "index", str(write(tmp_path / "runs", results)), env=env)
    assert done.returncode == 0, done.stderr
    return env


@pytest.mark.parametrize("thirteenth,expected", [(0.5, "slow"), (1.0, "normal")])
def test_twelve_runs_three_disturbed_and_a_thirteenth_halved_reads_slow(tmp_path, thirteenth, expected):
    """The issue's done-when, on recorded runs: the baseline rests on the 9 clean ones, with its CI;
    the 13th halved is slow by about half, unhalved normal."""
    env = indexed(tmp_path, history(thirteenth))
    shown = fabric_bench("baseline", env=env)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "from 9 clean runs (the last 10 clean runs); 3 disturbed left out" in text, text
    assert f"run {run_id(12)}: " in text and f": {expected}: " in text, text
    record = json.loads(fabric_bench("baseline", "--json", env=env).stdout)[0]
    clean = [run_id(i) for i in range(12) if i not in DISTURBED]
    assert record["baseline"]["run_ids"] == clean
    assert record["baseline"]["left_out_disturbed"] == [run_id(i) for i in sorted(DISTURBED)]
    values = sorted(RECORDED["sizes"][-1]["busbw_gbit_s"] * SPEEDS[i] for i in range(12) if i not in DISTURBED)
    assert record["baseline"]["median"] == pytest.approx(values[4], rel=1e-5)
    low, high = record["baseline"]["ci95"]
    assert low < record["baseline"]["median"] < high
    assert record["verdict"] == expected
    difference = record["difference"]["speed_ratio_minus_1"]
    assert difference == pytest.approx(thirteenth / sorted(SPEEDS[i] for i in clean_indices())[4] - 1, rel=1e-4)
    if expected == "slow":
        assert difference < -0.45 and record["difference"]["ci95"][1] < 0 and record["difference"]["confidence"] > 0.9
        assert f"{abs(difference):.1%} below this site's baseline" in text


def clean_indices() -> list[int]:
    return [i for i in range(12) if i not in DISTURBED]


def test_the_same_inputs_give_byte_identical_verdicts(tmp_path):
    env = indexed(tmp_path, history(0.5))
    first, second = (fabric_bench("baseline", "--json", env=env).stdout for _ in range(2))
    assert first == second and '"verdict": "slow"' in first
    runs = baseline.load(store.connect(tmp_path / "store.sqlite"), [HOST])
    again = [baseline.judge(runs, len(runs) - 1).text() for _ in range(2)]
    assert again[0] == again[1]
    assert json.loads(again[0]) == {k: v for k, v in json.loads(first)[0].items() if k != "changes"}


def test_too_few_clean_runs_is_no_baseline_yet(tmp_path):
    runs = [copy_of(run_id(i), 1.0, i == 1) for i in range(5)] + [copy_of(run_id(5), 0.5)]
    env = indexed(tmp_path, runs)
    text = fabric_bench("baseline", env=env).stdout
    assert "no baseline yet (4 of 5 clean runs; 1 disturbed left out)" in text, text
    assert json.loads(fabric_bench("baseline", "--json", env=env).stdout)[0]["verdict"] == "no baseline yet"


def test_a_new_stack_starts_a_new_baseline_and_says_so(tmp_path):
    runs = [copy_of(run_id(i), 1.0, stack="a" * 8) for i in range(8)]
    runs += [copy_of(run_id(8 + i), 0.5, stack="b" * 8) for i in range(3)]
    env = indexed(tmp_path, runs)
    text = fabric_bench("baseline", "--plot", str(tmp_path / "h.png"), env=env).stdout
    assert f"new baseline since {run_id(8)} (stack {'a' * 8} -> {'b' * 8})" in text, text
    assert "no baseline yet (2 of 5 clean runs)" in text  # the 8 runs on stack a are not mixed in
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_other_origins_only_when_asked_and_a_day_window(tmp_path):
    runs = [copy_of(run_id(i, day=1 + i), 1.0 + 0.01 * i) for i in range(6)]
    runs += [copy_of(run_id(i, day=1 + i), 0.5, host="site-b") for i in range(6, 9)]
    env = indexed(tmp_path, runs)
    here = json.loads(fabric_bench("baseline", "--json", env=env).stdout)
    assert [r["run_id"] for r in here] == [run_id(5, day=6)] and here[0]["baseline"]["runs"] == 5
    anywhere = json.loads(fabric_bench("baseline", "--json", "--any-origin", env=env).stdout)
    assert anywhere[0]["run_id"] == run_id(8, day=9) and anywhere[0]["baseline"]["runs"] == 8
    days = json.loads(fabric_bench("baseline", "--json", "--days", "3.5", env=env).stdout)
    assert days[0]["baseline"]["window"] == "the 3.5 days before the run" and days[0]["baseline"]["runs"] == 3
    assert fabric_bench("baseline", "--origin", "nowhere*", env=env).returncode == 2


def test_a_planted_step_change_is_found_at_its_run(tmp_path):
    """24 recorded copies, +-12 % apart, the last 10 a step 40 % slower: PELT names the 15th run;
    `--since` names it, `--changes` lists it alone; the plot marks it."""
    noise = [1.00, 0.93, 1.08, 0.97, 1.12, 0.90, 1.04, 0.95, 1.10, 0.88, 1.02, 0.98]
    speeds = [noise[i % 12] * (0.6 if i >= 14 else 1.0) for i in range(24)]
    env = indexed(tmp_path, [copy_of(run_id(i), s) for i, s in enumerate(speeds)])
    shown = fabric_bench("baseline", "--since", "--changes", "--plot", str(tmp_path / "p.png"), env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"  since {run_id(14)}, the first run after the last change: median " in shown.stdout, shown.stdout
    assert shown.stdout.count("changed at") == 1  # --changes: one change
    runs = baseline.load(store.connect(tmp_path / "store.sqlite"), None)
    [change] = baseline.change_points(runs)
    assert change.run_id == run_id(14) and change.size == pytest.approx(-0.4, abs=0.03)
    assert f"({abs(change.size):.0%} slower)" in shown.stdout
    assert baseline.change_points(runs[:14]) == []  # no step: no change
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_after_a_run_its_verdict_goes_beside_it_into_the_store_and_the_metrics(tmp_path, monkeypatch, capsys):
    results = history(0.5)
    root = write(tmp_path / "runs", results)
    monkeypatch.setenv("FABRIC_BENCH_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.delenv(metrics.METRICS_ENV, raising=False)
    store.index_tree(root / "")  # what the runs before it indexed
    newest = root / run_id(12)
    verdict = baseline.after_run(newest, read(newest / "result.json"))
    assert verdict is not None and verdict.verdict == "slow"
    assert "baseline: slow: " in capsys.readouterr().out
    assert (newest / "baseline.json").read_text() == verdict.text()
    [later] = baseline.survey(store.connect(), [HOST], run_id=run_id(12))  # what `baseline --run` shows
    assert later.verdict.text() == verdict.text()
    assert not list(tmp_path.rglob("*.prom"))  # no metrics directory: no metrics
    db = store.connect()
    assert db.execute("SELECT baseline_verdict FROM results WHERE run_id = ?", (run_id(12),)).fetchone()[0] == "slow"
    db.execute("DELETE FROM results")
    db.commit()
    store.index_tree(root)  # a rebuilt index reads the verdict beside the result
    assert db.execute("SELECT baseline_verdict FROM results WHERE run_id = ?", (run_id(12),)).fetchone()[0] == "slow"
    monkeypatch.setenv(metrics.METRICS_ENV, str(tmp_path / "metrics"))
    (newest / "baseline.json").unlink()
    assert baseline.after_run(newest, read(newest / "result.json"), echo=False).text() == verdict.text()
    [prom] = (tmp_path / "metrics").glob("*.prom")
    assert prom.name == f"fabricbench_{verdict.run.key.id}.prom"
    header, rows = report_tables.runs_table([read(newest / "result.json")], [])
    assert rows[0][header.index("vs this site's baseline")].startswith("slow: ")


def test_the_metrics_text_is_openmetrics_in_base_units_without_timestamps(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_BENCH_STORE", str(tmp_path / "store.sqlite"))
    hostile = history(0.5)
    for r in hostile:
        r["spec"]["fabric"] = 'eth"0\\\nx'
    store.index_tree(write(tmp_path / "runs", hostile))
    runs = baseline.load(store.connect(), [HOST])
    record = baseline.judge(runs, len(runs) - 1).record()
    text = metrics.text(record)
    assert text.endswith("\n# EOF\n") and text == metrics.text(record)
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert 10 <= len(samples) <= metrics.MAX_SERIES
    assert all(
        line.rsplit("} ", 1)[1].replace(".", "").replace("e+", "").replace("-", "").isdigit() for line in samples
    )
    busbw = next(line for line in samples if line.startswith("fabricbench_busbw_bytes_per_second{"))
    assert float(busbw.rsplit(" ", 1)[1]) == pytest.approx(record["figure"]["value"] * 1e9 / 8)
    assert 'fabric="eth\\"0\\\\\\nx"' in busbw
    assert "fabricbench_verdict{" in text and 'verdict="slow"} 1.0' in text
    assert [line for line in samples if "stack_digest=" in line] == [
        s for s in samples if s.startswith("fabricbench_run_info")
    ]
    halo = json.loads((DATA / "halo-g32-n2.result.json").read_text())
    assert metrics.family({"name": "time_per_iter_s", "unit": "s"})[:2] == ("fabricbench_time_per_iter", "seconds")
    assert baseline.run_of(read(DATA / "halo-g32-n2.result.json"), "x").figure.unit == "s" and halo["benchmark"]
    assert metrics.family({"name": "total_img_per_s", "unit": "img/s"})[:2] == (
        "fabricbench_total",
        "images_per_second",
    )


WRITER = """
import json, sys, time
from pathlib import Path
from launch.results import store
from launch.results.result import Result
worker, start, root, recorded = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]), json.loads(Path(sys.argv[4]).read_text())
while time.time() < start:
    time.sleep(0.001)
for i in range(25):
    result = {**recorded, "run_id": f"20261101T0{worker}{i:04d}-allreduce-mpi-n2-w{worker}"}
    where = root / result["run_id"]
    where.mkdir(parents=True)
    (where / "result.json").write_text(json.dumps(result))
    store.index_quietly(where / "result.json", Result(result))
"""


@pytest.mark.parametrize("old_store", [False, True], ids=["new-store", "store-missing-columns"])
def test_four_processes_writing_at_once_lose_no_row(tmp_path, old_store):
    """4 real processes x 25 results into one store at once: every row there and readable. The
    old store lacks columns added since, which the first writers add under the write lock."""
    path = tmp_path / "store.sqlite"
    if old_store:
        with sqlite3.connect(path) as db:
            columns = ", ".join(f"{c} TEXT" if c == "run_id" else c for c in store.COLUMNS if c != "steadiness")
            db.execute(
                f"CREATE TABLE results ({columns}, origin TEXT, path TEXT, indexed_unix REAL, result TEXT, {store.KEY})"
            )
    env = {**os.environ, "FABRIC_BENCH_STORE": str(path)}
    start = time.time() + 2
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                str(w),
                str(start),
                str(tmp_path / "runs"),
                str(DATA / "allreduce-mpi-n2.result.json"),
            ],
            cwd=REPO,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 4 and "warning" not in "".join(errors), errors
    db = store.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = db.execute("SELECT run_id, result FROM results").fetchall()
    assert len(rows) == 100 and len({r["run_id"] for r in rows}) == 100
    assert all(json.loads(r["result"])["run_id"] == r["run_id"] for r in rows)


@pytest.mark.slow
def test_a_real_run_prints_and_records_its_verdict(tmp_path):
    """LIVE: one tiny real halo run (1 rank, seconds): its verdict is printed, written beside its
    result, recorded in the store and written as metrics (no history: no baseline yet, or
    disturbed on a busy machine)."""
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "s.sqlite"), metrics.METRICS_ENV: str(tmp_path / "m")}
    done = fabric_bench(
        *("run", "--benchmark", "halo", "--ranks", "1", "--grid", "16", "--iters", "3", "--warmup", "1"),
        *("--results", str(tmp_path / "results")),
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [sidecar] = (tmp_path / "results").glob(f"*/{store.BASELINE_FILE}")
    record = json.loads(sidecar.read_text())
    assert record["verdict"] in ("no baseline yet", "disturbed")
    assert f"baseline: {record['words']} (baseline.json)" in done.stdout
    db = store.connect(tmp_path / "s.sqlite")
    assert [tuple(r) for r in db.execute("SELECT run_id, baseline_verdict FROM results")] == [
        (record["run_id"], record["verdict"])
    ]
    assert [p.name for p in (tmp_path / "m").iterdir()] == [f"fabricbench_{record['key_id']}.prom"]
