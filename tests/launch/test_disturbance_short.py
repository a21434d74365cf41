"""A short run's own processes are never others (issue 68): ranks that start and end between two
looks are counted as the run's (the keeper's tree with the CPU of the processes it reaped, the
ranks' own CPU time, the Slurm job's cgroup), and a window with too few looks inside it reads
"too short to judge", never "disturbed"."""

from __future__ import annotations

import os
import shutil

import pytest

from launch.disturbance import judge, sample
from launch.disturbance.sample import TICKS_PER_S, Snapshot
from launch.ranks.runspec import RunSpec
from launch.results.result import disturbance_summary
from launch.runs.run import execute_run, prepare
from tests.conftest import alive, need, rank_pids


def looks(times: list[float], others_cores: float, own_cores: float, seen_own: bool = True) -> list[Snapshot]:
    """Snapshots at `times` of a host where others use `others_cores` and the run `own_cores`;
    `seen_own` False: the run's processes never showed in a look (own_ticks stays put)."""

    def at(t: float) -> Snapshot:
        other = round(others_cores * (t - times[0]) * TICKS_PER_S)
        own = round(own_cores * (t - times[0]) * TICKS_PER_S)
        return Snapshot(
            t,
            {0: other + own},
            0,
            own if seen_own else 0,
            0,
            {(999, 1): ("fbtest-hog", other)},
            {},
            [],
            0,
            0,
            0,
            io_some_us=0,
            io_full_us=0,
        )

    return [at(t) for t in times]


def allreduce_records(start: float, end: float, cpu_each: float, host: str = "here") -> list[dict]:
    """Two ranks' whole-run records (the allreduce writes no progress records), each counting
    `cpu_each` seconds of its own CPU between its program's start and its record."""
    return [
        {
            "kind": "allreduce",
            "rank": rank,
            "host": host,
            "program_start_unix": start,
            "time_unix": end,
            "program_start_cpu_seconds": 0.2,
            "cpu_seconds": 0.2 + cpu_each,
        }
        for rank in (0, 1)
    ]


def test_a_window_with_too_few_looks_reads_too_short_to_judge_and_with_enough_is_judged():
    busy = {"hosts": ["here"]}
    every_half_second = looks([100.0, 100.5, 101.0], 1.0, 0.0)  # a busy neighbour at one core
    # no look inside a 0.2 s window: the neighbour's figures are kept, but never a verdict
    short = judge.record(every_half_second, allreduce_records(100.6, 100.8, 0.0), busy, 0.5, host="here")
    assert short["verdict"] == judge.TOO_SHORT and short["causes"] == [], short
    assert short["window"]["looks_inside"] == 0
    assert short["window"]["too_short"] == "0 look(s) inside the 0.20 s window, 1 needed"
    cpu = short["signals"][judge.CPU]
    assert cpu["verdict"] == judge.TOO_SHORT and cpu["would_read"] == "disturbed" and cpu["other_cores"] > 0.9
    assert disturbance_summary({"disturbance": short}) == "too short to judge"
    # one look inside a 0.1 s window, but the looks around it 1 s apart: read over ten times its length
    wide = judge.record(every_half_second, allreduce_records(100.45, 100.55, 0.0), busy, 0.5, host="here")
    assert wide["verdict"] == judge.TOO_SHORT and "1.00 s apart, over 3 times its length" in wide["window"]["too_short"]
    # the same 0.2 s window looked at every 0.1 s is judged: the neighbour is named
    often = looks([100.0 + i / 10 for i in range(11)], 1.0, 0.0)
    judged = judge.record(often, allreduce_records(100.6, 100.8, 0.0), busy, 0.1, host="here")
    assert judged["verdict"] == "disturbed" and [c["signal"] for c in judged["causes"]] == [judge.CPU]
    assert "fbtest-hog 1.00" in judged["causes"][0]["words"] and "too_short" not in judged["window"]


def test_ranks_no_look_saw_are_the_runs_by_their_own_cpu_time():
    """Ranks outside the keeper's tree that lived between looks (srun's steps on this host): their
    own CPU time in the window is the run's, not others'; a rank on a host not sampled here is not."""
    times = [100.0 + i / 10 for i in range(11)]
    unseen = looks(times, 0.0, 1.0, seen_own=False)  # the host busy by one core: the run's two ranks
    records = allreduce_records(100.0, 101.0, 0.5)
    cpu, _ = judge.cpu_signal(unseen, 1.0, judge.window_of(records)["ranks_cpu_seconds"]["here"])
    assert cpu["run_cores_from"] == judge.FROM_RANKS and cpu["run_cores"] == pytest.approx(1.0, abs=0.02)
    assert cpu["other_cores"] < 0.05 and cpu["verdict"] == "clean", cpu
    found = judge.record(unseen, records, {"hosts": ["here"]}, 0.1, host="here")
    assert found["verdict"] == "clean" and found["window"]["ranks_cpu_seconds"] == {"here": 1.0}
    # the same ranks on another host: not sampled here, so their CPU cannot be this host's
    elsewhere = judge.record(unseen, allreduce_records(100.0, 101.0, 0.5, "far"), {"hosts": ["far"]}, 0.1, host="here")
    assert elsewhere["verdict"] == "disturbed" and elsewhere["signals"]["cpu"]["run_cores_from"] == judge.FROM_PROCESSES


def test_the_slurm_jobs_cgroup_counts_the_run_whoever_reaped_it(tmp_path):
    """A node's sampler runs as a step of the run's job: the job's cgroup (cpu.stat usage_usec),
    less the sampler's own CPU, is the run's. Read from a /proc and a cgroup tree made here."""
    v2 = "0::/system.slice/slurmstepd.scope/job_42/step_3/user/task_0\n"
    v1 = "4:memory:/slurm/uid_0/job_7/step_0\n3:cpu,cpuacct:/slurm/uid_0/job_7/step_0/task_1\n"
    assert sample.job_cgroup(v2) == ("", "/system.slice/slurmstepd.scope/job_42")
    assert sample.job_cgroup(v1) == ("cpu,cpuacct", "/slurm/uid_0/job_7")
    assert sample.job_cgroup("0::/user.slice/user-0.slice/session-1.scope\n") is None
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(v2)
    (proc / "stat").write_text("cpu0 0 0 0 0 0 0 0 0\n")
    job = cgroups / "system.slice" / "slurmstepd.scope" / "job_42"
    job.mkdir(parents=True)
    sampler = sample.Sampler(os.getpid(), proc=str(proc), cgroup_root=str(cgroups), interval=0.1)
    stats = []
    for usage_usec, busy in ((1_000_000, 0), (2_500_000, 150)):  # 1.5 s of the job's CPU in 1 s
        (job / "cpu.stat").write_text(f"usage_usec {usage_usec}\nuser_usec 1\nsystem_usec 1\n")
        (proc / "stat").write_text(f"cpu0 {busy} 0 0 0 0 0 0 0\n")
        stats.append(sampler.take())
    a, b = stats
    assert (a.cgroup, a.cgroup_usec, a.cgroup_has_self) == ("/system.slice/slurmstepd.scope/job_42", 1_000_000, True)
    own, where, counted = judge.own_ticks(stats, None)
    assert where == judge.FROM_CGROUP and counted[judge.FROM_CGROUP] == pytest.approx(
        1.5 * TICKS_PER_S - (b.self_ticks - a.self_ticks)
    )
    assert judge.cpu_signal(stats, 1.0)[0]["other_cores"] < 0.05


@pytest.mark.slow
def test_a_short_allreduces_own_ranks_between_two_looks_are_the_runs_and_too_short_to_judge(tmp_path, monkeypatch):
    """A real 2-rank 1 MiB allreduce under mpirun, looked at only as it starts and as it ends (the
    interval held at 30 s): its ranks live between the two looks, and are counted as the run's."""
    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    monkeypatch.setattr(sample, "interval_at", lambda elapsed: 30.0)
    spec = RunSpec(
        benchmark="allreduce",
        backend="mpi",
        launcher="mpirun",
        runtime="host",
        ranks=2,
        min_bytes=1 << 20,
        max_bytes=1 << 20,
        iters=5,
        warmup=1,
    )
    results = tmp_path / "results"
    try:
        run = execute_run(spec, prepare(spec, results), timeout=120, echo=False)
    finally:
        pids = rank_pids(results)
    assert run["status"] == "ok", run.get("reason")
    record = run["disturbance"]
    assert record["sampler"]["snapshots"] == 2 and record["window"]["looks_inside"] == 0, record["window"]
    assert record["verdict"] == judge.TOO_SHORT and record["causes"] == [], record
    counted = record["signals"][judge.CPU]["run_cores_counted"]
    # the ranks' own count, and the run's processes count at least as much: the ranks, mpirun and
    # its daemon, which no look ever saw (they were others' before: "short-lived processes")
    assert counted[judge.FROM_RANKS] > 0.1, counted
    assert counted[judge.FROM_PROCESSES] >= 0.95 * counted[judge.FROM_RANKS], counted
    assert len(pids) == 2 and not alive(pids)


def test_the_looks_come_often_early_and_every_half_second_later():
    assert sample.interval_at(0.0) == sample.interval_at(1.9) == sample.SHORTEST_INTERVAL_S
    assert sample.interval_at(4.0) == pytest.approx(0.2) and sample.interval_at(60.0) == sample.INTERVAL_S
    # a one-second run: about ten looks; a minute's: a third more than at a fixed 0.5 s (120)
    for seconds, fewest, most in ((1.0, 10, 11), (60.0, 140, 160)):
        t, n = 0.0, 0
        while t < seconds:
            t += sample.interval_at(t)
            n += 1
        assert fewest <= n <= most, (seconds, n)


def test_a_jobs_cgroup_is_read_in_microseconds_under_v1_and_v2_and_none_where_absent(tmp_path):
    assert sample.cgroup_usec(str(tmp_path), ("", "/nowhere/job_1")) is None
    (tmp_path / "cpuacct" / "slurm" / "job_1").mkdir(parents=True)
    (tmp_path / "cpuacct" / "slurm" / "job_1" / "cpuacct.usage").write_text("2500000000\n")  # nanoseconds
    assert sample.cgroup_usec(str(tmp_path), ("cpuacct", "/slurm/job_1")) == 2_500_000
    (tmp_path / "unified" / "job_2").mkdir(parents=True)  # a hybrid host: v2 under unified/
    (tmp_path / "unified" / "job_2" / "cpu.stat").write_text("usage_usec 77\n")
    assert sample.cgroup_usec(str(tmp_path), ("", "/job_2")) == 77
