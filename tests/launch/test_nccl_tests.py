"""nccl-tests' all_reduce_perf output, read on recorded real outputs (tests/data/nccl_tests/*/SOURCE.md)."""

from pathlib import Path

import pytest

from launch.results import nccl_tests

DATA = Path(__file__).parents[1] / "data" / "nccl_tests"


def test_a_two_node_table_with_its_header_is_read_row_by_row():
    out = nccl_tests.parse((DATA / "gb10-two-nodes" / "all_reduce_perf.out").read_text())
    assert (out["version"], out["ranks"], out["warmup"], out["iters"]) == ("2.20.0", 2, 10, 100)
    assert [r["bytes"] for r in out["rows"]] == [8192, 16384, 32768, 65536]
    last = out["rows"][-1]
    assert last["out_of_place"] == {"time_us": 67.93, "algbw_gbyte_s": 0.96, "busbw_gbyte_s": 0.96, "wrong": 0.0}
    assert last["in_place"]["time_us"] == 64.71 and last["count"] == 16384 and last["type"] == "float"
    for row in out["rows"]:  # 2 ranks: busbw = algbw x 2(n-1)/n = algbw
        assert row["out_of_place"]["busbw_gbyte_s"] == pytest.approx(row["out_of_place"]["algbw_gbyte_s"])


def test_mpiruns_tag_prefix_is_ignored_and_in_place_differs_from_out_of_place():
    out = nccl_tests.parse((DATA / "p5-mpirun-tagged" / "all_reduce_perf.out").read_text())
    assert [r["bytes"] for r in out["rows"]] == [8, 16, 32]
    assert (out["rows"][2]["out_of_place"]["time_us"], out["rows"][2]["in_place"]["time_us"]) == (22.25, 13.34)
    assert out["version"] is None and out["ranks"] is None
