import json

import pytest

from launch.errors import UsageError
from launch.results.assemble import assemble, write_result
from launch.results.result import Result, read as load_result, scaling_efficiency
from launch.ranks.runspec import RunSpec


def train_record(rank, samples, compute, diff=0.0):
    return {
        "schema_version": 1,
        "kind": "train",
        "rank": rank,
        "host": f"h{rank}",
        "time_unix": 0,
        "samples_img_per_s": samples,
        "compute_samples_img_per_s": compute,
        "params_max_abs_diff": diff,
        "params_sha256": "abc",
        "gradient_bytes": 4,
        "config": {"batch_size": 10},
        "versions": {"torch": "x"},
    }


def result_of(records, ranks=2, exit_code=0, **kw):
    spec = RunSpec(ranks=ranks).as_dict()
    return assemble(
        run_id="r",
        spec=spec,
        argv=["a"],
        env={},
        records=records,
        exit_code=exit_code,
        log_tail=["last line"],
        seconds=1.0,
        **kw,
    )


def test_total_is_the_sum_of_ranks_per_iteration():
    r = result_of([train_record(0, [10, 20], [20, 20]), train_record(1, [30, 40], [40, 40])])
    assert r["status"] == "ok"
    assert r["samples"]["total_img_per_s"] == [40, 60]
    assert r["throughput"]["total_img_per_s"] == pytest.approx(50)
    assert r["throughput"]["per_rank_img_per_s"] == pytest.approx(25)
    assert r["throughput"]["total_img_per_s"] == pytest.approx(sum(r["throughput"]["rank_img_per_s"]))
    # rank 0 trains at 15 img/s vs 20 without exchange (25 %), rank 1 at 35 vs 40 (12.5 %)
    assert r["comm_fraction"] == pytest.approx((0.25 + 0.125) / 2)


def test_parameter_disagreement_fails_the_run():
    r = result_of([train_record(0, [10], [10]), train_record(1, [10], [10], diff=0.5)])
    assert r["status"] == "failed" and "parameters differ" in r["reason"]
    assert r["log_tail"] == ["last line"]


def test_missing_rank_and_rank_errors_fail_the_run():
    error = {
        "schema_version": 1,
        "kind": "error",
        "rank": 1,
        "host": "h",
        "time_unix": 0,
        "error": "RuntimeError: gloo died",
    }
    r = result_of([train_record(0, [10], [10]), error], exit_code=1)
    assert r["status"] == "failed"
    assert "rank 1: RuntimeError: gloo died" in r["reason"] and "[1] wrote no train record" in r["reason"]


def test_nonzero_exit_alone_fails_the_run():
    r = result_of([train_record(0, [10], [10])], ranks=1, exit_code=137)
    assert r["status"] == "failed" and "137" in r["reason"]


def test_scaling_efficiency_against_one_rank():
    one = result_of([train_record(0, [10, 10], [10, 10])], ranks=1)
    two = result_of([train_record(0, [8, 8], [10, 10]), train_record(1, [8, 8], [10, 10])])
    one, two = Result(one), Result(two)
    assert scaling_efficiency(two.figure, two.world_size, one.figure, one.world_size) == pytest.approx(0.8)


def test_results_are_written_once_and_read_back(tmp_path):
    r = result_of([train_record(0, [10], [10])], ranks=1)
    path = write_result(tmp_path, r)
    assert load_result(path)["run_id"] == "r"
    with pytest.raises(UsageError):
        write_result(tmp_path, {**r, "run_id": "other"})
    assert json.loads(path.read_text())["run_id"] == "r"


def test_unknown_schema_is_refused(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"schema_version": 42}))
    with pytest.raises(UsageError, match="schema_version"):
        load_result(tmp_path / "result.json")


def test_ranks_that_share_one_host_s_cores_are_judged_against_the_same_cores():
    """make bench on 2 cores: 2 ranks gave 111.6 img/s in all against 110.6 at 1 rank. The per-rank
    efficiency (0.50) read as poor scaling; against the same cores it is 1.01 (issue 33, item 8)."""
    from launch.analysis import aggregate
    from tests.results import train_result

    one = train_result("one", img=110.6, ranks=1, spec={"nodes": 1, "gpus_per_node": 0})
    two = train_result("two", img=111.6, ranks=2, spec={"nodes": 1, "gpus_per_node": 0})
    point = aggregate.point_of(aggregate.aggregate([one, two]), two)
    assert point.shares_cores and point.run_efficiency(two) == pytest.approx(0.5045, abs=1e-3)
    assert point.same_cores_efficiency(two) == pytest.approx(111.6 / 110.6)
    gpu = train_result("gpu", img=200.0, ranks=2, spec={"nodes": 1, "gpus_per_node": 2})
    gpu_one = train_result("gpu1", img=100.0, ranks=1, spec={"nodes": 1, "gpus_per_node": 2})
    gpu_point = aggregate.point_of(aggregate.aggregate([gpu_one, gpu]), gpu)
    assert not gpu_point.shares_cores and gpu_point.same_cores_efficiency(gpu) is None
