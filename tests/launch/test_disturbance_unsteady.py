"""Disturbed is a cause, unsteady is a property (issue 55): a run whose own steps vary, with nothing
measured outside it, is clean and unsteady, kept in its point and its verdict with the word beside
it; the same run beside others' CPU is disturbed by it and left out. A version-3 result recorded
when the step series was a cause reads as version 4 does: its steps cause dropped, a run disturbed
by its steps alone clean and unsteady."""

from __future__ import annotations

import json
import pytest

from launch.disturbance import judge
from launch.disturbance.sample import TICKS_PER_S, Snapshot
from launch.analysis import aggregate, verdict
from launch.results import result
from launch.analysis.report_tables import health_table
from tests.conftest import REPO
from tests.results import train_result

DATA = REPO / "tests" / "data" / "results_v3"
STEADY = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.8, 99.2] * 2
UNSTEADY = [100.0, 60.0] * 8  # every other step 40 % slower: the run's own, no warm-up to cut


def snapshots(others_cores: float, seconds: float = 10.0) -> list[Snapshot]:
    """Looks every 0.5 s over `seconds` (a judged window needs looks inside it: judge.MIN_LOOKS_INSIDE):
    the run used one core, others `others_cores`."""
    own = int(seconds * TICKS_PER_S)
    other = int(others_cores * seconds * TICKS_PER_S)

    def at(t: float, share: float) -> Snapshot:
        ticks = int(share * own), int(share * other)
        return Snapshot(
            100.0 + t,
            {0: ticks[0] + ticks[1]},
            0,
            ticks[0],
            0,
            {(999, 1): ("fbtest-hog", ticks[1])},
            {(998, 1): ticks[0]},
            [],
            0,
            0,
            0,
            io_some_us=0,
            io_full_us=0,
        )

    looks = int(seconds / 0.5)
    return [at(i * 0.5, i / looks) for i in range(looks + 1)]


def progress(seconds: float = 10.0) -> list[dict]:
    return [{"kind": "progress", "rank": 0, "step_end_unix": 101.0 + i} for i in range(int(seconds) - 1)]


def judged(samples: list[float], others_cores: float, run_id: str) -> dict:
    run = train_result(run_id, img=sum(samples) / len(samples), ranks=2, samples=samples, spec={"nodes": 1})
    run = {**run, "schema_version": result.SCHEMA_VERSION}
    return {**run, "disturbance": judge.record(snapshots(others_cores), progress(), run, 0.5)}


def test_a_run_whose_own_steps_vary_is_unsteady_not_disturbed():
    shaky = judged(UNSTEADY, 0.0, "shaky")
    record = shaky["disturbance"]
    assert record["verdict"] == "clean" and record["causes"] == [], record
    assert record["steadiness"] == "unsteady" and "coefficient of variation" in record["unsteady_because"][0]
    assert not result.disturbed(shaky) and result.unsteady(shaky)
    assert result.disturbance_summary(shaky) == "clean; unsteady"
    assert judge.STEPS not in judge.SIGNALS  # the step series is never a cause
    steady = judged(STEADY, 0.0, "steady")
    assert steady["disturbance"]["steadiness"] == "steady" and result.disturbance_summary(steady) == "clean"


def test_the_same_run_beside_others_cpu_is_disturbed_and_named():
    busy = judged(STEADY, 0.9, "busy")
    record = busy["disturbance"]
    assert record["verdict"] == "disturbed" and [c["signal"] for c in record["causes"]] == ["cpu"]
    assert "fbtest-hog 0.90" in record["causes"][0]["words"] and record["steadiness"] == "steady"
    both = judged(UNSTEADY, 0.9, "both")
    assert result.disturbance_summary(both) == "disturbed: cpu; unsteady"


def test_a_verdict_keeps_the_unsteady_run_says_so_and_leaves_the_disturbed_one_out():
    one = [{**train_result("one", img=50.0, ranks=1, spec={"nodes": 1}), "schema_version": result.SCHEMA_VERSION}]
    runs = [
        {**judged(STEADY, 0.0, "a-steady"), "spec": {"fabric": "a", "nodes": 1}},
        {**judged(UNSTEADY, 0.0, "b-shaky"), "spec": {"fabric": "b", "nodes": 1}},
        {**judged(STEADY, 0.0, "b-steady"), "spec": {"fabric": "b", "nodes": 1}},
        {**judged(STEADY, 0.9, "b-busy"), "spec": {"fabric": "b", "nodes": 1}},
    ]
    points = aggregate.aggregate(runs + one)
    b = next(p for p in points if p.fabric == "b")
    assert sorted(result.as_result(r).run_id for r in b.runs) == ["b-shaky", "b-steady"]
    assert b.unsteady == ["b-shaky"] and [x["run_id"] for x in b.left_out] == ["b-busy"]
    data = verdict.verdicts(points, "fabric", "a")
    (row,) = data["rows"]
    assert row["unsteady"] == ["b-shaky"] and row["left_out"][0]["run_id"] == "b-busy"
    header, cells = verdict.table_rows(data)
    assert cells[0][header.index("value")].endswith("(x2, 1 unsteady)")
    assert "1 unsteady run was kept" in data["paragraph"] and "1 disturbed run was left out" in data["paragraph"]
    _, health = health_table(runs)
    assert {row[0]: row[-1].split(";")[:2] for row in health}["b-shaky"] == ["clean", " unsteady"]


def recorded_v3() -> dict:
    """tests/data/results_v3/cpu-and-steps (SOURCE.md there): a result schema 3's judge wrote."""
    return json.loads((DATA / "cpu-and-steps" / "result.json").read_text())


def as_read(tmp_path, value: dict) -> result.Result:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(value))
    return result.read(path)


def test_an_old_result_disturbed_by_cpu_and_its_steps_reads_as_disturbed_by_cpu_and_unsteady():
    raw = recorded_v3()
    assert raw["schema_version"] == 3 and [c["signal"] for c in raw["disturbance"]["causes"]] == ["cpu", "steps"]
    old = result.read(DATA / "cpu-and-steps" / "result.json")
    assert old["schema_version"] == 4 and old["migrated_from"] == 3 and result.malformed(old) is None
    assert result.disturbed(old) and result.unsteady(old)
    assert [c["signal"] for c in old["disturbance"]["causes"]] == ["cpu"]
    assert old["disturbance"]["signals"]["steps"]["verdict"] == "unsteady"
    assert result.unsteady_because(old) == raw["disturbance"]["signals"]["steps"]["reasons"]
    assert result.disturbance_summary(old) == "disturbed: cpu; unsteady"
    assert result.disturbance_summary(raw) == "disturbed: cpu; unsteady"  # read raw, migrated the same
    assert not result.disagreements(old)  # no steady_state then: its figures are over every step


def test_an_old_result_disturbed_by_its_steps_alone_reads_as_clean_and_unsteady(tmp_path):
    """The recorded record as schema 3 wrote it where others' CPU was under its limit: the steps its
    only cause, and so `disturbed`."""
    raw = recorded_v3()
    record = raw["disturbance"]
    cpu = {**record["signals"]["cpu"], "other_cores": 0.03, "top": [], "verdict": "clean"}
    steps_only = {
        **record,
        "verdict": "disturbed",
        "causes": [c for c in record["causes"] if c["signal"] == "steps"],
        "signals": {**record["signals"], "cpu": cpu},
    }
    old = as_read(tmp_path, {**raw, "disturbance": steps_only})
    assert not result.disturbed(old) and result.unsteady(old)
    assert old["disturbance"]["verdict"] == "clean" and old["disturbance"]["causes"] == []
    assert result.disturbance_summary(old) == "clean; unsteady" and result.malformed(old) is None
    assert result.disturbed({**raw, "disturbance": steps_only}) is False  # read raw, migrated the same
    # where its host was not sampled (no cpu or memory signal) it reads as not recorded, still unsteady
    unsampled = {**steps_only, "signals": {"steps": record["signals"]["steps"]}}
    again = as_read(tmp_path, {**raw, "disturbance": unsampled})
    assert again["disturbance"]["verdict"] == "not recorded" and result.unsteady(again)


@pytest.mark.parametrize("bad", [{"verdict": ["x"], "signals": {"steps": {"verdict": []}}}, "text", {"signals": 3}])
def test_a_malformed_old_record_is_refused_in_words_not_by_a_crash(bad):
    from launch import schema

    old = {**train_result("r", img=1.0), "schema_version": 3, "disturbance": bad}
    assert schema.problem(old) is not None
