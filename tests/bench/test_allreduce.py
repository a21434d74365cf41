import json
import shutil

import pytest

from bench.allreduce import busbw_factor, gbit_s, message_sizes
from tests.conftest import fabric_bench, need


def test_busbw_follows_nccl_tests():
    assert busbw_factor(2) == 1.0
    assert busbw_factor(4) == 1.5
    assert busbw_factor(8) == pytest.approx(1.75)
    assert gbit_s(125_000_000, 1.0) == pytest.approx(1.0)


def test_sizes_double_from_min_to_max():
    assert message_sizes(8, 64) == [8, 16, 32, 64]
    assert message_sizes(8, 256 * 2**20)[-1] == 256 * 2**20
    assert len(message_sizes(8, 256 * 2**20)) == 26


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "nccl2"], "unknown backend 'nccl2'"),
        (["--min-bytes", "6"], "--min-bytes must be a positive multiple of 4"),
        (["--min-bytes", "64", "--max-bytes", "32"], "--min-bytes must be"),
        (["--benchmark", "allgather"], "unknown benchmark 'allgather'"),
    ],
)
def test_bad_allreduce_input_is_one_line_exit_2(args, message, tmp_path):
    proc = fabric_bench("run", "--benchmark", "allreduce", "--results", str(tmp_path), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi", "torch", "horovod"])
def test_allreduce_runs_and_checks_values(backend, tmp_path):
    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    if backend == "horovod":
        pytest.importorskip("horovod.torch")
    proc = fabric_bench(
        "run",
        "--benchmark",
        "allreduce",
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
    result = json.loads(next(tmp_path.glob("*/result.json")).read_text())
    assert result["status"] == "ok" and result["correct"] and result["backend"] == backend
    rows = result["sizes"]
    assert [r["bytes"] for r in rows] == message_sizes(8, 2**16)
    for row in rows:
        assert row["max_abs_error"] == 0 and row["time_us"] > 0 and row["ops_per_sample"] >= 1
        assert row["algbw_gbit_s"] == pytest.approx(gbit_s(row["bytes"], row["time_us"] * 1e-6))
        assert row["busbw_gbit_s"] == pytest.approx(row["algbw_gbit_s"])  # 2 ranks: factor 1
        assert (row["out_of_place"] is None) is (backend == "torch")  # torch.distributed: in place only
    if backend != "horovod":  # Horovod has no point-to-point operations
        assert [p["bytes"] for p in result["p2p"]] == [8, 2**16]


def test_the_sweep_top_is_cut_to_what_the_gpu_memory_holds():
    """Issue 42, item 3: NCCL runs sweep to 8 GiB, cut to a size whose buffers fit the free device
    memory of every rank sharing the GPU."""
    from bench.collective import BUFFERS_PER_SIZE, MEMORY_SHARE, largest_fitting

    gib = 2**30
    assert largest_fitting(8 * gib, 140 * gib, 1) == 8 * gib  # an H200 holds it
    assert largest_fitting(8 * gib, 20 * gib, 1) == int(MEMORY_SHARE * 20 * gib) // BUFFERS_PER_SIZE
    assert largest_fitting(8 * gib, 40 * gib, 2) < largest_fitting(8 * gib, 40 * gib, 1)


def test_nccl_runs_default_to_8_gib_and_host_runs_to_256_mib():
    from launch.ranks.runspec import RunSpec

    assert RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=8, ranks=8).max_bytes == 8 * 2**30
    assert RunSpec(benchmark="allreduce", backend="torch", ranks=2).max_bytes == 256 * 2**20
    assert RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=8, ranks=8, max_bytes=2**20).max_bytes == 2**20


def one_rank(backend: str, tmp_path, extra_env=None, *more: str) -> dict:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "CUDA_VISIBLE_DEVICES": "",
        **(extra_env or {}),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.allreduce",
            "--backend",
            backend,
            "--max-bytes",
            "4096",
            "--iters",
            "3",
            "--warmup",
            "2",
            "--ops-per-sample",
            "7",
            *more,
            "--record-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return next(
        json.loads(line)
        for line in (tmp_path / "rank-0.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "allreduce"
    )


def test_timing_follows_nccl_tests_back_to_back_in_and_out_of_place(tmp_path):
    """Issue 42, item 8, on the CPU path (a singleton MPI rank; no GPU here): each sample is
    --ops-per-sample operations back to back, timed whole, per operation; MPI has an out-of-place
    allreduce (two buffers) beside the in-place one; values are checked after the timing."""
    record = one_rank("mpi", tmp_path)
    assert record["backend_info"]["timing"] == "wall clock" and record["config"]["ops_per_sample"] == 7
    for row in record["sizes"]:
        assert row["ops_per_sample"] == 7 and row["n_samples"] == 3 and row["max_abs_error"] == 0
        assert row["out_of_place"]["n_samples"] == 3 and row["out_of_place"]["time_us"] > 0
        assert row["algbw_gbit_s"] == pytest.approx(gbit_s(row["bytes"], row["time_us"] * 1e-6))
        assert row["busbw_gbit_s"] == 0.0  # one rank: 2(n-1)/n = 0, as nccl-tests prints


def test_in_place_only_times_no_out_of_place_form_and_locate_asks_for_it(tmp_path):
    """What locate reads of a pair (launch.fleet.locate.steps.read_pair) is the in-place busbw and
    the ping-pong: its steps leave the out-of-place form out, a third of each step's measuring."""
    from launch.fleet.locate import steps

    record = one_rank("mpi", tmp_path, None, "--in-place-only")
    assert record["config"]["in_place_only"] is True
    assert all(row["out_of_place"] is None and row["n_samples"] == 3 for row in record["sizes"])
    assert "--in-place-only" in steps.step_argv("7", ("n0", "n1"), tmp_path, 2**21, None)


def test_torch_has_no_out_of_place_allreduce_and_says_so(tmp_path):
    from containers.host import free_ports

    pytest.importorskip("torch")
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_ports(1)[0]),
    }
    record = one_rank("torch", tmp_path, env)
    assert record["backend_info"]["timing"] == "wall clock"  # cuda events on a GPU
    assert all(row["out_of_place"] is None and row["max_abs_error"] == 0 for row in record["sizes"])
