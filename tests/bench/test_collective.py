"""One collective program (bench.collective) and one parametrised collective kind
(launch.kinds.collective): each collective of bench.collectives is a kind by its registration
alone, its exchange code is checked value by value, and broadcast, added as one more, is measured,
aggregated, compared, plotted and reported for real."""

import json
import shutil
import time

import pytest

from bench.collectives import ALLREDUCE, BROADCAST, COLLECTIVES, ROOT
from bench.transports import MPITransport
from launch.kinds import KINDS
from tests.conftest import alive, fabric_bench, need, rank_pids


def host_ranks(size: int) -> list[MPITransport]:
    """The numpy side of the MPI transport for `size` ranks, without MPI: the value check alone."""
    import numpy as np

    ranks = []
    for rank in range(size):
        transport = object.__new__(MPITransport)
        transport.np, transport.rank, transport.size = np, rank, size
        ranks.append(transport)
    return ranks


def test_every_collective_is_a_kind_of_the_one_program_with_nccl_tests_factors():
    assert set(COLLECTIVES) == {"allreduce", "alltoall", "broadcast"}
    for name, collective in COLLECTIVES.items():
        kind = KINDS[name]
        assert kind.programs == {"torch": "bench.collective", "tf": "bench.collective"}
        assert kind.metric.name == "busbw_gbit_s" and kind.metric.unit == "Gbit/s" and kind.metric.higher_is_better
        assert kind.sizes_plot == f"{collective.title} bus bandwidth vs message size"
        assert kind.busbw_factor(4) == collective.busbw_factor(4) and kind.workload == collective.workload
    assert [BROADCAST.busbw_factor(n) for n in (1, 2, 8)] == [1.0, 1.0, 1.0]  # busbw = algbw
    assert [KINDS["allreduce"].busbw_factor(n) for n in (2, 4)] == [1.0, 1.5]
    assert KINDS["alltoall"].busbw_factor(4) == 0.75


def test_the_broadcast_check_catches_a_rank_the_values_never_reached():
    ranks, count = host_ranks(3), 10
    root = BROADCAST.buffers(ranks[ROOT], count)[0]
    for r in ranks:
        send, recv = BROADCAST.buffers(r, count)
        BROADCAST.reset(r, send, recv)  # the starting state: the root's values, zeros elsewhere
        expected = BROADCAST.expected(r, count)
        assert r.max_abs_diff(recv, expected) == (0 if r.rank == ROOT else pytest.approx(7.0))
        recv[:] = root  # what MPI_Bcast leaves
        assert r.max_abs_diff(recv, expected) == 0


def test_the_allreduce_check_is_the_sum_of_every_rank_s_values():
    ranks, count = host_ranks(4), 9
    total = sum(ALLREDUCE.buffers(r, count)[0] for r in ranks)
    for r in ranks:
        assert r.max_abs_diff(total, ALLREDUCE.expected(r, count)) == 0
        assert r.max_abs_diff(total * 0.5, ALLREDUCE.expected(r, count)) > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--collective", "allgather"], "unknown collective 'allgather'; choose from allreduce, alltoall, broadcast"),
        (["--collective", "broadcast", "--backend", "horovod"], "unknown backend 'horovod'; choose from mpi, torch"),
    ],
)
def test_bad_program_input_is_one_line_exit_2(args, message, tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.run(
        [sys.executable, "-m", "bench.collective", *args, "--record-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_bad_broadcast_input_is_one_line_exit_2(tmp_path):
    proc = fabric_bench("run", "--benchmark", "broadcast", "--backend", "horovod", "--results", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "unknown backend 'horovod'; choose from mpi, torch" in proc.stderr


@pytest.mark.slow
def test_broadcast_is_measured_aggregated_compared_plotted_and_reported(tmp_path):
    """Issue 52's proof: broadcast, added as a collective (its entry in bench/collectives.py, its
    line in launch/kinds/collectives.py), runs for real on 2 ranks and every consumer handles it."""
    from bench.collective import message_sizes
    from launch.analysis import aggregate
    from launch.results.result import read_tree

    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    runs = tmp_path / "runs"
    for _ in range(2):  # two repetitions of one point
        proc = fabric_bench(
            "run",
            "--benchmark",
            "broadcast",
            "--backend",
            "mpi",
            "--ranks",
            "2",
            "--max-bytes",
            str(2**14),
            "--iters",
            "3",
            "--warmup",
            "1",
            "--results",
            str(runs),
            timeout=180,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "Broadcast (mpi, 2 ranks)" in proc.stdout  # the run's table, as the kind draws it
    measured, problems = read_tree([runs])
    assert problems == [] and len(measured) == 2
    for found in measured:  # measured: every size, values checked, busbw = algbw
        assert found["status"] == "ok" and found["correct"] and found["benchmark"] == "broadcast"
        assert [row["bytes"] for row in found["sizes"]] == message_sizes(8, 2**14)
        assert all(row["max_abs_error"] == 0 and row["busbw_gbit_s"] == row["algbw_gbit_s"] for row in found["sizes"])
        assert found["p2p"] == []

    (point,) = aggregate.aggregate(measured, keep_disturbed=True)  # aggregated: one point of two repetitions
    assert (point.benchmark, point.ranks, point.repetitions, point.metric.unit) == ("broadcast", 2, 2, "Gbit/s")
    assert point.series.endswith("/mpi/broadcast") and point.mean > 0

    a, b = (str(r.path) for r in measured)
    compared = fabric_bench("compare", a, b, "--json", "--default-tolerance", "100", "--keep-disturbed")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    metrics = json.loads(compared.stdout)["metrics"]
    assert [m["metric"] for m in metrics] == [f"busbw_gbit_s@{n}" for n in message_sizes(8, 2**14)]
    assert all(m["run"] == "mpi/broadcast x2" and m["within"] for m in metrics)

    report = fabric_bench("report", str(runs), "--output", str(tmp_path / "report"), "--keep-disturbed")
    assert report.returncode == 0, report.stderr[-2000:]
    data = json.loads((tmp_path / "report" / "report_data.json").read_text())
    plot = data["plots"]["broadcast_busbw"]  # plotted
    assert plot["title"] == "Broadcast bus bandwidth vs message size" and len(plot["series"]) == 2
    assert all(len(s["x"]) == len(message_sizes(8, 2**14)) for s in plot["series"])
    assert {p["benchmark"] for p in data["points"]} == {"broadcast"}  # reported
    figure = data["table"]["header"].index("figure of merit")
    assert all(row[figure].endswith(" Gbit/s") for row in data["table"]["rows"])
    assert (tmp_path / "report" / "broadcast_busbw.png").stat().st_size > 0

    pids = rank_pids(runs)
    assert len(pids) == 4
    time.sleep(0.5)
    assert not alive(pids)
