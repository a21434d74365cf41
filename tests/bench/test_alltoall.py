"""The all-to-all collective (bench.collectives.ALLTOALL, one instance of launch.kinds.collective):
its figures follow nccl-tests, its check catches a misplaced block, and through its registration
alone it reaches runs, sweeps, verdicts, reports and plausibility."""

import json
import shutil
import time

import pytest

from bench.collective import message_sizes
from bench.collectives import ALLTOALL, block_count, gbit_s
from tests.bench.test_collective import host_ranks  # the value check on host buffers, without MPI
from tests.conftest import alive, fabric_bench, need, rank_pids

busbw_factor = ALLTOALL.busbw_factor


def test_busbw_follows_nccl_tests_alltoall():
    assert busbw_factor(2) == 0.5
    assert busbw_factor(4) == 0.75
    assert busbw_factor(8) == pytest.approx(0.875)


def test_a_size_is_cut_to_a_whole_block_per_rank():
    assert block_count(8, 2) == 2 and block_count(4, 2) == 0
    assert block_count(100, 3) == 24  # 25 floats: 8 per rank
    assert block_count(2**20, 8) == 2**18


def test_the_value_check_passes_the_exchange_and_catches_a_misplaced_block():
    import numpy as np

    ranks, count = host_ranks(3), 12
    sent = [ALLTOALL.buffers(r, count)[0] for r in ranks]
    block = count // 3
    for r in ranks:  # rank r receives block r of every rank j, in rank order
        expected = ALLTOALL.expected(r, count)
        received = np.concatenate([sent[j][r.rank * block : (r.rank + 1) * block] for j in range(3)])
        assert r.max_abs_diff(received, expected) == 0
        assert r.max_abs_diff(sent[r.rank], expected) > 0  # nothing exchanged
        assert r.max_abs_diff(received[::-1].copy(), expected) > 0  # blocks out of order


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "horovod"], "unknown backend 'horovod'; choose from mpi, torch"),
        (["--min-bytes", "6"], "--min-bytes must be a positive multiple of 4"),
        # device buffers to MPI: only in an image that says its MPI is CUDA-aware (launch.site.preflight)
        (["--backend", "mpi", "--gpus-per-node", "1"], "alltoall --backend mpi on GPUs: a run on the host"),
    ],
)
def test_bad_alltoall_input_is_one_line_exit_2(args, message, tmp_path):
    proc = fabric_bench("run", "--benchmark", "alltoall", "--results", str(tmp_path), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def alltoall_result(run_id: str, fabric: str, busbw: float, hosts: int = 2, rate: float | None = None) -> dict:
    """A result made by the bundle's own assembler from 2 ranks' alltoall records."""
    from launch.results.assemble import assemble

    rows = [
        {
            "bytes": b,
            "time_us": b * 8 / (2 * busbw * 1e3),
            "algbw_gbit_s": 2 * busbw,
            "busbw_gbit_s": busbw,
            "samples_us": [b * 8 / (2 * busbw * 1e3) * f for f in (0.98, 1.0, 1.02)],
            "n_samples": 3,
            "max_abs_error": 0.0,
        }
        for b in (2**20, 2**23, 2**24)
    ]
    records = [
        {
            "kind": "alltoall",
            "rank": rank,
            "host": f"n{rank % hosts}",
            "backend": "mpi",
            "correct": True,
            "sizes": rows,
            "p2p": [],
        }
        for rank in (0, 1)
    ]
    spec = {
        "benchmark": "alltoall",
        "framework": "torch",
        "engine": "ddp",
        "model": "resnet18",
        "ranks": 2,
        "nodes": hosts,
        "fabric": fabric,
        "warmup": 1,
    }
    return assemble(
        run_id=run_id,
        spec=spec,
        argv=["x"],
        env={},
        records=records,
        exit_code=0,
        log_tail=[],
        seconds=1.0,
        extra={"link_rate_gbit_s": rate} if rate else None,
    )


def test_the_kind_reaches_sweeps_verdicts_reports_and_plausibility_through_its_plug_in_alone(tmp_path):
    """Issue 43's proof, kept through issue 52: nothing outside its entry in bench/collectives.py and
    its line in launch/kinds/collectives.py names the kind, and every consumer handles it."""
    from launch.kinds import kind_of
    from launch.analysis import aggregate, report, verdict
    from launch.results import plausibility
    from launch.results.result import typed

    results = [alltoall_result(f"a{i}", "ethernet", 0.9 + 0.01 * i) for i in range(3)] + [
        alltoall_result(f"b{i}", "infiniband", 1.8 + 0.01 * i) for i in range(3)
    ]
    points = aggregate.aggregate(results)
    assert {(p.benchmark, p.fabric, p.metric.name, p.metric.unit) for p in points} == {
        ("alltoall", "ethernet", "busbw_gbit_s", "Gbit/s"),
        ("alltoall", "infiniband", "busbw_gbit_s", "Gbit/s"),
    }
    assert sorted(round(p.mean, 2) for p in points) == [0.91, 1.81]
    assert all(p.n_samples == 9 and p.series.endswith("/mpi/alltoall") for p in points)
    (row,) = verdict.all_verdicts(points, "ethernet")["fabric"]["rows"]
    assert row["benchmark"] == "alltoall" and row["speed_ratio"] == pytest.approx(1.81 / 0.91, rel=1e-3)

    judged = plausibility.verdict(alltoall_result("c", "ethernet", 0.9, rate=1.0))
    assert judged["measure"] == "alltoall busbw at large messages" and judged["verdict"] == "healthy"
    assert judged["message_bytes"] == [2**23, 2**24]  # the sizes at and above 8 MiB

    for r in results:
        (tmp_path / "runs" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "runs" / r["run_id"] / "result.json").write_text(json.dumps(r))
    data = report.build([tmp_path / "runs"], tmp_path / "report")
    plot = data["plots"]["alltoall_busbw"]
    assert plot["title"] == "All-to-all bus bandwidth vs message size" and len(plot["series"]) == 6
    assert "allreduce_busbw" not in data["plots"]  # its rows are not an allreduce's
    assert {p["benchmark"] for p in data["points"]} == {"alltoall"}

    fields = typed(results[0])
    assert fields is not None and kind_of(results[0]).table(fields).title == "All-to-all (mpi, 2 ranks)"


def test_an_experiment_sweeps_the_kind_without_the_fields_it_does_not_read(tmp_path):
    from launch.plan.experiment import expand, load_experiment

    path = tmp_path / "exp.toml"
    path.write_text(
        '[experiment]\nname = "a2a"\nrepetitions = 1\n[run]\nmax_bytes = 4096\n'
        '[matrix]\nbenchmark = ["alltoall", "train"]\nmodel = ["resnet18", "resnet50"]\n'
        "ranks_per_node = [2]\n"
    )
    points = [p for p in expand(load_experiment(path)) if p.spec.benchmark == "alltoall"]
    assert {p.spec.model for p in points} == {"resnet18"}  # not run once per model
    assert all(p.label.startswith("alltoall-mpi-") for p in points)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_alltoall_runs_through_fabric_bench_run_and_checks_values(backend, tmp_path):
    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    proc = fabric_bench(
        "run",
        "--benchmark",
        "alltoall",
        "--backend",
        backend,
        "--ranks",
        "2",
        "--max-bytes",
        str(2**16),
        "--iters",
        "3",
        "--warmup",
        "1",
        "--results",
        str(tmp_path),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "All-to-all" in proc.stdout  # the run's table, as the kind draws it
    result = json.loads(next(tmp_path.glob("*/result.json")).read_text())
    assert result["status"] == "ok" and result["correct"] and result["backend"] == backend
    assert result["benchmark"] == "alltoall" and result["run_id"].split("-")[1:3] == ["alltoall", backend]
    rows = result["sizes"]
    assert [r["bytes"] for r in rows] == message_sizes(8, 2**16)  # 2 ranks: every size holds whole blocks
    for row in rows:
        assert row["max_abs_error"] == 0 and row["time_us"] > 0
        assert row["algbw_gbit_s"] == pytest.approx(gbit_s(row["bytes"], row["time_us"] * 1e-6))
        assert row["busbw_gbit_s"] == pytest.approx(row["algbw_gbit_s"] / 2)  # 2 ranks: (n-1)/n
    assert result["plausibility"]["verdict"] == "not applicable"  # one host: nothing crossed a fabric
    pids = rank_pids(tmp_path)
    assert len(pids) == 2
    time.sleep(0.5)
    assert not alive(pids)
