"""`fabric-bench predict`: the bucketed-overlap model and its command line."""

import dataclasses
import json

import pytest

from launch.predict import predict
from launch.results.result import Result
from launch.errors import UsageError
from tests.conftest import fabric_bench

MIB = 2**20


def train_result(run_id="t1", ranks=2, engine="ddp", compute=40.0, batch=8, gradient_bytes=40 * MIB, **info):
    return {
        "schema_version": 1,
        "run_id": run_id,
        "benchmark": "train",
        "framework": "torch",
        "engine": engine,
        "model": "resnet18",
        "world_size": ranks,
        "status": "ok",
        "spec": {"batch_size": batch, "fabric": "emu-eth-1g", "nodes": ranks},
        "throughput": {"total_img_per_s": 30.0, "per_rank_img_per_s": 30.0 / ranks},
        "compute_img_per_s": compute,
        "gradient_bytes": gradient_bytes,
        "engine_info": info,
    }


def allreduce_result(fabric="emu-eth-1g", gbit=1.0, alpha_us=50.0, ranks=2):
    beta = 8 / (gbit * 1e9)
    sizes = [
        {
            "bytes": 2**k,
            "time_us": (2 * (ranks - 1) * alpha_us * 1e-6 + 2 * (ranks - 1) / ranks * 2**k * beta) * 1e6,
            "busbw_gbit_s": 1.0,
        }
        for k in range(16, 27)
    ]
    return {
        "schema_version": 1,
        "run_id": "a1",
        "benchmark": "allreduce",
        "world_size": ranks,
        "status": "ok",
        "backend": "torch",
        "spec": {"fabric": fabric},
        "sizes": sizes,
        "link_rate_gbit_s": gbit,
    }


def test_one_rank_is_the_compute_step_and_efficiency_one():
    w = predict.workload_from(train_result())
    assert w.compute_step_s == pytest.approx(8 * 2 / 40.0)  # measured with 2 ranks sharing the host
    p = predict.predict_point(w, predict.NOMINAL["25GbE"], 1)
    assert p["step_s"] == pytest.approx(w.compute_step_s) and p["scaling_efficiency"] == 1.0 and p["allreduces"] == 0


def test_ddp_buckets_overlap_the_backward_pass_and_the_bound_does_not():
    fabric = predict.Fabric("slow", 0.0, 1.0, "nominal")  # 1 Gbit/s, no latency
    w = predict.Workload(
        engine="ddp",
        batch_size=8,
        compute_step_s=0.3,
        gradient_bytes=26 * MIB,
        bucket_bytes=25 * MIB,
        backward_share=2 / 3,
    )
    assert predict.ddp_buckets(w.gradient_bytes, w.bucket_bytes) == [1 * MIB, 25 * MIB]
    p = predict.predict_point(w, fabric, 2)
    t1, t25 = (fabric.allreduce_s(s, 2) for s in (1 * MIB, 25 * MIB))
    # bucket 1 ready after 1/26 of the backward, bucket 2 at its end: only bucket 2 is exposed
    backward = 0.2
    end = max(backward, max(backward / 26 + t1, backward) + t25)
    assert p["step_s"] == pytest.approx(0.1 + end)
    assert p["step_no_overlap_s"] == pytest.approx(0.3 + t1 + t25)
    assert p["step_s"] < p["step_no_overlap_s"]


def test_horovod_fuses_what_is_ready_each_cycle_up_to_the_threshold():
    fabric = predict.Fabric("fast", 0.0, 1000.0, "nominal")
    w = predict.Workload(
        engine="horovod",
        batch_size=8,
        compute_step_s=0.3,
        gradient_bytes=20 * MIB,
        bucket_bytes=128 * MIB,
        cycle_s=0.01,
        backward_share=2 / 3,
    )
    p = predict.predict_point(w, fabric, 8)
    # a fast fabric: one allreduce per 10 ms cycle of the 200 ms backward, nothing exposed but the last
    assert p["allreduces"] == pytest.approx(20, abs=1)
    assert p["step_s"] == pytest.approx(0.3, rel=0.02)
    capped = predict.predict_point(predict.Workload(**{**w.as_dict(), "bucket_bytes": 1 * MIB}), fabric, 8)
    assert capped["allreduces"] >= 20


def test_efficiency_falls_with_ranks_and_faster_fabrics_scale_better():
    w = predict.workload_from(train_result(gradient_bytes=100 * MIB))
    data = predict.predict(w, list(predict.NOMINAL.values()), list(predict.DEFAULT_RANKS))
    by = {(p["fabric"], p["ranks"]): p for p in data["points"]}
    eth = [by["25GbE", n]["scaling_efficiency"] for n in predict.DEFAULT_RANKS]
    assert eth == sorted(eth, reverse=True) and eth[0] == 1.0
    assert by["infiniband-hdr-200", 1024]["scaling_efficiency"] > by["25GbE", 1024]["scaling_efficiency"]
    assert data["workload"]["gradient_bytes"] == 100 * MIB and data["ranks"][-1] == 1024  # inputs recorded


def test_fit_from_an_allreduce_result():
    fabric = predict.fabric_from_allreduce(Result(allreduce_result(gbit=2.0, alpha_us=30.0)))
    assert fabric.bandwidth_gbit_s == pytest.approx(2.0, rel=1e-6) and fabric.alpha_s == pytest.approx(30e-6, rel=1e-3)
    assert fabric.name == "emu-eth-1g" and "a1" in fabric.source


@pytest.mark.parametrize("bad", ["0", "1,-2", "x"])
def test_ranks_below_one_are_refused(bad):
    with pytest.raises(UsageError, match="--ranks"):
        predict.parse_ranks(bad)


def write(tmp_path, name, data):
    path = tmp_path / name
    path.mkdir()
    (path / "result.json").write_text(json.dumps(data))
    return str(path)


def test_cli_prints_the_table_and_records_every_input(tmp_path):
    train = write(tmp_path, "train", train_result())
    ar = write(tmp_path, "ar", allreduce_result())
    proc = fabric_bench(
        "predict",
        "--train",
        train,
        "--allreduce",
        ar,
        "--fabric",
        "emu-eth-1g",
        "--nominal",
        "--ranks",
        "1,2,4,1024",
        "--output",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "25GbE" in proc.stdout and "nominal" in proc.stdout and "emu-eth-1g" in proc.stdout
    data = json.loads((tmp_path / "out" / "predict.json").read_text())
    assert data["ranks"] == [1, 2, 4, 1024] and len(data["points"]) == 4 * (1 + len(predict.NOMINAL))
    assert data["workload"]["source"]["run_id"] == "t1"
    assert (tmp_path / "out" / "predict.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "case, message",
    [
        ("other-fabric", "ran on fabric emu-eth-1g, not 'emu-eth-10g'"),
        ("no-compute", "has no compute_img_per_s"),
        ("ranks-zero", "--ranks expects integers >= 1"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, case, message):
    train = train_result()
    if case == "no-compute":
        del train["compute_img_per_s"]
    args = [
        "predict",
        "--train",
        write(tmp_path, "train", train),
        "--allreduce",
        write(tmp_path, "ar", allreduce_result()),
    ]
    args += {"other-fabric": ["--fabric", "emu-eth-10g"], "no-compute": [], "ranks-zero": ["--ranks", "0,2"]}[case]
    proc = fabric_bench(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_host_cost_of_the_exchange_is_taken_from_the_compute_and_scales_like_the_ring():
    fast_link = train_result(compute=40.0)  # step 8 / 15 img/s per rank = 533 ms, compute 400 ms
    overhead, ranks = predict.host_overhead_from(fast_link)
    assert overhead == pytest.approx(8 / 15.0 - 0.4) and ranks == 2
    w = predict.Workload(
        engine="ddp",
        batch_size=8,
        compute_step_s=0.4,
        gradient_bytes=MIB,
        bucket_bytes=25 * MIB,
        host_overhead_s=overhead,
        host_overhead_ranks=2,
    )
    fabric = predict.Fabric("fast", 0.0, 1000.0, "nominal")
    assert predict.predict_point(w, fabric, 2)["step_s"] == pytest.approx(8 / 15.0, rel=1e-3)
    assert predict.predict_point(w, fabric, 4)["host_overhead_s"] == pytest.approx(overhead * 0.75 / 0.5)
    assert predict.predict_point(w, fabric, 1)["step_s"] == pytest.approx(0.4)  # one rank exchanges nothing
    with pytest.raises(UsageError, match="multi-rank"):
        predict.host_overhead_from(train_result(ranks=1))


def test_host_cost_adds_to_a_wire_bound_step_instead_of_hiding_under_the_wire():
    """With no core to spare, the exchange's copies and reductions come before or after each
    transfer: a slow link's step is the overlapped schedule plus h, not the larger of the two."""
    w = predict.Workload(engine="ddp", batch_size=8, compute_step_s=0.3, gradient_bytes=50 * MIB, bucket_bytes=25 * MIB)
    slow = predict.Fabric("0.5gbit", 0.0, 0.5, "nominal")
    without = predict.predict_point(w, slow, 2)
    assert without["step_s"] > 0.3 + 0.4  # the wire (50 MiB at 0.5 Gbit ~ 0.84 s) bounds the step
    with_host = predict.predict_point(dataclasses.replace(w, host_overhead_s=0.4), slow, 2)
    assert with_host["step_s"] == pytest.approx(without["step_s"] + 0.4)
    assert with_host["exposed_comm_s"] == pytest.approx(with_host["step_s"] - 0.3)


@pytest.mark.parametrize("engine", ["ddp", "horovod"])
def test_the_spread_rule_lies_between_hiding_the_host_cost_and_adding_it(engine):
    """Horovod's rule (DDP's alternative): h spread over the wire time, its share
    while backward runs taken from the compute. On a wire far faster than the compute every
    bucket but the last is sent during backward and it comes to the series rule; on a slow one
    most of h hides under the wire's tail."""
    w = predict.Workload(
        engine=engine,
        batch_size=8,
        compute_step_s=0.6,
        gradient_bytes=47 * MIB,
        bucket_bytes=25 * MIB if engine == "ddp" else 128 * MIB,
        host_overhead_s=0.15,
    )
    shares = []
    for gbit in (0.5, 1, 2.5, 5, 1000):
        p = predict.predict_point(w, predict.Fabric(f"{gbit}", 0.0, gbit, "nominal"), 2)
        hidden = max(p["step_host_series_s"] - p["host_overhead_s"], w.compute_step_s + p["host_overhead_s"])
        assert hidden - 1e-12 <= p["step_host_spread_s"] <= p["step_host_series_s"] + 1e-12
        shares.append(p["wire_during_backward"])
    # a faster wire sends more of the gradients during backward
    assert all(b >= a - 1e-9 for a, b in zip(shares, shares[1:])) and 0 <= shares[0] < shares[-1] <= 1
    fast = predict.predict_point(w, predict.Fabric("fast", 0.0, 1e6, "nominal"), 2)
    assert fast["step_host_spread_s"] == pytest.approx(fast["step_host_series_s"], rel=1e-3)
    assert predict.predict_point(w, predict.NOMINAL["25GbE"], 1)["step_host_spread_s"] == pytest.approx(0.6)


@pytest.mark.parametrize("engine, rule", list(predict.HOST_RULE.items()))
def test_each_engine_meets_the_host_cost_by_its_own_rule(engine, rule):
    """DDP adds h in series; Horovod spreads it over the wire, so on a slow link most of it
    hides beside the wire's tail: the two rules part where the wire bounds the step."""
    w = predict.Workload(
        engine=engine,
        batch_size=8,
        compute_step_s=0.6,
        gradient_bytes=47 * MIB,
        bucket_bytes=25 * MIB if engine == "ddp" else 128 * MIB,
        host_overhead_s=0.3,
    )
    p = predict.predict_point(w, predict.Fabric("0.5gbit", 0.0, 0.5, "nominal"), 2)
    assert p["host_rule"] == rule
    assert p["step_host_spread_s"] < p["step_host_series_s"] - 0.1  # they differ here
    assert p["step_s"] == p[f"step_host_{rule}_s"]
    assert p["exposed_comm_s"] == pytest.approx(p["step_s"] - 0.6)
    assert p["scaling_efficiency"] == pytest.approx(0.6 / p["step_s"])


def test_cli_names_the_host_cost_rule_of_the_engine(tmp_path):
    train = write(tmp_path, "train", train_result(engine="horovod"))
    ar = write(tmp_path, "ar", allreduce_result(gbit=0.5))
    proc = fabric_bench(
        "predict",
        "--train",
        train,
        "--allreduce",
        ar,
        "--ranks",
        "1,2",
        "--host-overhead-ms",
        "300",
        "--output",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "host exchange cost 300.0 ms at 2 ranks (spread" in " ".join(proc.stdout.split())
    points = json.loads((tmp_path / "out" / "predict.json").read_text())["points"]
    two = next(p for p in points if p["ranks"] == 2)
    assert two["host_rule"] == "spread" and two["step_s"] == two["step_host_spread_s"] < two["step_host_series_s"]
