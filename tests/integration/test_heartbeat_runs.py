"""The rank that hangs or lags, named on real 2-rank DDP runs: a test-only fault
(bench.progress.FAULT_ENV) makes exactly one rank stuck or slow."""

from __future__ import annotations

import json
import time

import pytest

from bench.progress import FAULT_ENV
from tests.results import only_result
from tests.conftest import alive, fabric_bench, rank_pids

pytestmark = pytest.mark.slow
TINY = [
    "--engine",
    "ddp",
    "--ranks",
    "2",
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--batches-per-iter",
    "2",
]


def none_alive(pids: set[int]) -> bool:
    time.sleep(0.5)
    return not alive(pids)


def test_a_stuck_rank_ends_the_run_and_is_named_with_the_last_batch_each_rank_reached(tmp_path):
    # rank 1 sleeps 600 s before its 4th batch; rank 0 then waits for it in the exchange
    started = time.monotonic()
    proc = fabric_bench(
        "run",
        *TINY,
        "--iters",
        "20",
        "--env",
        f"{FAULT_ENV}=1:600@4",
        "--stall-timeout",
        "15",
        "--results",
        str(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert time.monotonic() - started < 150
    r = only_result(tmp_path)
    assert r["status"] == "stalled" and "hanging: rank 1" in r["reason"]
    stall = r["stall"]
    assert stall["hanging_ranks"] == [1] and stall["timeout_s"] == 15
    assert [(x["rank"], x["batches_started"]) for x in stall["ranks"]] == [(0, 4), (1, 3)]
    assert none_alive(rank_pids(tmp_path))


def test_a_slow_rank_is_named_a_straggler_and_the_others_are_not(tmp_path):
    proc = fabric_bench(
        "run", *TINY, "--iters", "3", "--env", f"{FAULT_ENV}=1:0.4", "--results", str(tmp_path), timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = only_result(tmp_path)
    found = r["stragglers"]
    assert [s["rank"] for s in found["ranks"]] == [1] and found["ranks"][0]["excess"] > found["share"]
    assert none_alive(rank_pids(tmp_path))


def beat_pids(results_dir) -> set[int]:
    return {json.loads(path.read_text().strip())["pid"] for path in results_dir.glob("*/ranks/heartbeat-*.json")}


@pytest.mark.parametrize(
    "benchmark",
    [
        ["--benchmark", "halo", "--grid", "16"],
        ["--benchmark", "allreduce", "--min-bytes", "1024", "--max-bytes", "4096"],
    ],
)
def test_the_communication_benchmarks_beat_too_and_a_stuck_rank_is_named(tmp_path, benchmark):
    # rank 1 sleeps 600 s before its 4th step; rank 0 waits for it in the next collective
    proc = fabric_bench(
        "run",
        *benchmark,
        "--ranks",
        "2",
        "--warmup",
        "1",
        "--iters",
        "20",
        "--env",
        f"{FAULT_ENV}=1:600@4",
        "--stall-timeout",
        "8",
        "--results",
        str(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    r = only_result(tmp_path)
    assert r["status"] == "stalled" and "hanging: rank 1" in r["reason"], r.get("reason")
    assert [(x["rank"], x["batches_started"]) for x in r["stall"]["ranks"]] == [(0, 4), (1, 3)]
    pids = beat_pids(tmp_path)
    assert len(pids) == 2 and none_alive(pids)
