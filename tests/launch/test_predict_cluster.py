"""The cluster predictor: topology, the libraries' allreduce algorithms and choice, the
non-network term and the ranges (launch.predict.cluster, .collectives, .predict_cluster, .study)."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from launch.cli.app import app
from launch.errors import UsageError
from launch.predict import cluster, collectives, predict_cluster, study
from launch.predict.predict import MIB, Workload
from tests.conftest import fabric_bench
from tests.launch.test_predict import train_result

PROBE = Path(__file__).resolve().parent.parent / "data" / "probe"
GIB = 2**30


def h100(network="ib-ndr-8x400", **kw):
    return cluster.make("hgx-h100", network, **kw)


def mid(c):
    return collectives.corners(c)["mid"]


def test_inside_one_node_every_algorithm_is_the_node_ring_on_nvlink():
    c = h100()
    k = mid(c)
    t, _ = collectives.allreduce_s(c, 8, GIB, k)
    b_gpu = 450e9 * sum(c.intra.fraction) / 2
    assert t == pytest.approx(2 * 7 / 8 * GIB / b_gpu + 2 * 7 * sum(c.intra.latency_us) / 2 * 1e-6)


def test_across_nodes_the_ring_runs_at_the_node_network_not_the_nvlink():
    c = h100("tcp-100", algorithm="ring")
    k = mid(c)
    t, algo = collectives.allreduce_s(c, 16, GIB, k)
    b_node = 100e9 / 8 * k.inter_fraction
    assert algo == "ring" and t == pytest.approx(2 * 15 / 16 * GIB / b_node, rel=0.01)
    # eight 400 Gb rails move it ~32 / 0.7-ish times faster than one 100 GbE TCP NIC
    fast, _ = collectives.allreduce_s(h100(algorithm="ring"), 16, GIB, mid(h100()))
    assert 20 < t / fast < 60


def test_gloo_runs_one_ring_over_one_nic_and_mpi_halving_doubling():
    gloo = cluster.make("hgx-h100", "ib-ndr-8x400", library="gloo")
    t_gloo, algo = collectives.allreduce_s(gloo, 16, GIB, mid(gloo))
    t_nccl, _ = collectives.allreduce_s(h100(algorithm="ring"), 16, GIB, mid(h100()))
    assert algo == "ring" and t_gloo == pytest.approx(8 * t_nccl, rel=0.02)  # one of eight rails
    mpi = cluster.make("hgx-h100", "ib-ndr-8x400", library="mpi")
    assert collectives.allreduce_s(mpi, 16, GIB, mid(mpi))[1] == "halving-doubling"


def test_latency_grows_linearly_for_the_ring_and_logarithmically_for_tree_and_halving_doubling():
    def small(algo, nodes):
        c = h100(algorithm=algo)
        return collectives.allreduce_s(c, 8 * nodes, 64, mid(c))[0]

    ring_growth = small("ring", 64) / small("ring", 8)
    assert ring_growth > 6
    assert small("tree", 64) / small("tree", 8) < 2
    assert small("halving-doubling", 64) / small("halving-doubling", 8) < 2
    # the hierarchical ring keeps its inter-node steps 2(N-1), not 2(p-1)
    assert small("hierarchical-ring", 64) < small("ring", 64)


def test_nccl_chooses_the_tree_for_small_messages_at_scale_and_the_ring_for_large_ones_on_two_nodes():
    c = h100()
    assert collectives.choose(c, 64, 8, 4096, mid(c)) == "tree"
    assert collectives.choose(c, 2, 8, GIB, mid(c)) == "ring"
    assert collectives.choose(h100(algorithm="tree"), 2, 8, GIB, mid(c)) == "tree"  # fixed by the user


def test_the_nccl_log_names_the_algorithm_by_bytes_carried():
    # lines in NCCL's TUNING format strings (src/enqueue.cc, INFO(NCCL_TUNING, ...)), newer and older
    newer = (
        "x:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}\n"
        "x:1:1 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo Ring proto Simple channel{Lo..Hi}={0..15}\n"
        "x:1:1 [0] NCCL INFO AllGather: 99999999 Bytes -> Algo Tree proto Simple channel{Lo..Hi}={0..1}\n"
    )
    assert collectives.algorithm_from_nccl_log(newer) == "ring"
    older = "NCCL INFO 4096 Bytes -> Algo 0 proto 0 time 12.5\nNCCL INFO 8192 Bytes -> Algo 0 proto 0 time 13.0\n"
    assert collectives.algorithm_from_nccl_log(older) == "tree"
    assert collectives.algorithm_from_nccl_log("NCCL INFO NCCL_ALGO set by environment to Ring") == "ring"
    assert collectives.algorithm_from_nccl_log("NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto Simple") is None
    assert collectives.algorithm_from_nccl_log("nothing here") is None


def test_the_probe_reads_gpus_and_nvlink_from_recorded_topology_matrices():
    a100 = (PROBE / "topo-8gpu-nv12-18nic" / "nvidia_smi_topo.txt").read_text()
    intra, inter = cluster.from_probe(a100, [200.0] * 8)
    assert intra.gpus == 8 and intra.gbit_s == 12 * 25 * 8 == cluster.NODE_TYPES["hgx-a100"].gbit_s
    assert inter.rails == 8 and inter.node_gbit_s == 1600
    six = (PROBE / "topo-6gpu-nv4-2nic" / "nvidia_smi_topo.txt").read_text()
    assert cluster.from_probe(six, [100.0])[0].gbit_s == 4 * 25 * 8  # NV4 pairs, not a switch
    pcie = (PROBE / "topo-2gpu-phb-tabs" / "nvidia_smi_topo.txt").read_text()
    assert "PCIe" in cluster.from_probe(pcie, [25.0])[0].name
    with pytest.raises(UsageError, match="no GPU rows"):
        cluster.from_probe("hello", [25.0])


@pytest.mark.parametrize(
    "spec, message",
    [
        ("8x", "RAILSxGBIT"),
        ("8x400,2", "0 < low <= high <= 1"),
        ("8x400,0.9-0.8", "0 < low <= high <= 1"),
        ("8x400,0.8,a", "LATENCY_US"),
    ],
)
def test_bad_network_specs_are_one_clear_error(spec, message):
    with pytest.raises(UsageError, match=message):
        cluster.checked(cluster.Cluster("x", cluster.NODE_TYPES["hgx-h100"], cluster.parse_inter(spec)))


def test_a_site_file_is_validated_and_nothing_in_it_runs(tmp_path):
    good = tmp_path / "site.json"
    good.write_text(
        json.dumps(
            {
                "name": "site",
                "node_type": "hgx-a100",
                "inter": {"rails": 4, "gbit_s": 200, "fraction": [0.7, 0.9], "latency_us": [2, 5]},
                "library": "nccl",
            }
        )
    )
    c = cluster.from_site_file(good)
    assert (c.gpus_per_node, c.inter.node_gbit_s, c.inter.fraction) == (8, 800, (0.7, 0.9))
    for bad, message in (
        ({"inter": "ib-ndr-8x400", "run": "rm -rf /"}, "keys among"),
        ({"inter": {"rails": 0, "gbit_s": 1}}, "rails must be an integer"),
        ({"node_type": "hgx-h100"}, "'inter'"),
        ({"inter": "ib-ndr-8x400", "library": "nvshmem"}, "library"),
    ):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=message):
            cluster.from_site_file(path)


def workload(step_s=0.3, gradient_bytes=100 * MIB):
    return Workload(
        engine="ddp", batch_size=128, compute_step_s=step_s, gradient_bytes=gradient_bytes, bucket_bytes=25 * MIB
    )


def test_every_point_carries_a_range_around_its_mid_and_uncalibrated_says_so():
    data = predict_cluster.predict(workload(), [h100("tcp-100")], [1, 8, 16, 64])
    assert data["non_network"]["calibrated"] is False and "ASSUMED" in data["non_network"]["source"]
    for p in data["points"]:
        lo, hi = p["scaling_efficiency_range"]
        assert lo <= p["scaling_efficiency"] <= hi
        if p["ranks"] > 8:
            assert hi - lo > 0.02  # the unknowns span something
    assert data["points"][0]["scaling_efficiency_range"] == [1.0, 1.0]


def test_a_calibration_reproduces_its_own_run_and_narrows_the_range():
    w, c = workload(), h100("tcp-100")
    network = predict_cluster.point(w, c, 16, predict_cluster.NonNetwork(((1.0, 0.0),), True, "x"))["step_s"]
    measured = network + 0.02  # 20 ms the network does not explain
    cal = predict_cluster.calibrate(w, c, 16, measured, "run")
    assert cal.calibrated and cal.pairs[1] == (1.0, pytest.approx(0.02))
    at = predict_cluster.point(w, c, 16, cal)
    assert at["step_s_range"][0] <= measured <= at["step_s_range"][1]
    free = predict_cluster.point(w, c, 64, predict_cluster.uncalibrated(w))
    tied = predict_cluster.point(w, c, 64, cal)
    width = lambda p: p["scaling_efficiency_range"][1] - p["scaling_efficiency_range"][0]  # noqa: E731
    assert width(tied) < width(free)
    with pytest.raises(UsageError, match="multi-rank"):
        predict_cluster.calibrate(w, c, 1, 0.3)


def test_halving_the_wire_dtype_halves_the_exposed_communication_on_a_slow_link():
    c = h100("tcp-100")
    fp32 = predict_cluster.point(workload(0.1, 400 * MIB), c, 32, predict_cluster.NonNetwork(((1.0, 0.0),), True, ""))
    fp16 = predict_cluster.point(workload(0.1, 200 * MIB), c, 32, predict_cluster.NonNetwork(((1.0, 0.0),), True, ""))
    assert fp16["exposed_comm"] < 0.6 * fp32["exposed_comm"]


def test_the_study_answers_with_ranges_and_rdma_beats_one_tcp_nic_for_transformers():
    data = study.run("hpec2020-today", nodes=(2, 64))
    at = {(r["model"], r["network"], r["nodes"]): r for r in data["rows"]}
    for r in data["rows"]:
        assert r["efficiency_range"][0] <= r["efficiency"] <= r["efficiency_range"][1]
        assert not math.isnan(r["throughput"])
    gpt_ib, gpt_tcp = at[("GPT 1.3B", "ib-ndr-8x400", 64)], at[("GPT 1.3B", "tcp-100", 64)]
    assert gpt_tcp["efficiency_range"][1] < gpt_ib["efficiency_range"][0]  # the ranges do not overlap
    assert len(data["answer"]) == len(study.MODELS)
    with pytest.raises(UsageError, match="one of hpec2020-today"):
        study.run("hpec1999")


def test_cli_cluster_mode_prints_ranges_and_records_every_input(tmp_path):
    train = tmp_path / "train" / "result.json"
    train.parent.mkdir()
    train.write_text(
        json.dumps(
            {
                **train_result(ranks=1, compute=400.0, batch=128, gradient_bytes=102228128),
                "wire": {
                    "dtype": "float32",
                    "gradient_bytes": 102228128,
                    "bucket_bytes": 50 * MIB,
                    "first_bucket_bytes": MIB,
                },
            }
        )
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "predict",
            "--train",
            str(train),
            "--node-type",
            "dgx-1-v100",
            "--inter",
            "ib-edr-1x100",
            "--inter",
            "1x25,0.5-0.9,10-30,tcp",
            "--nodes",
            "1,2,4",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "UNCALIBRATED" in result.output and "[" in result.output
    data = json.loads((out / "predict.json").read_text())
    assert data["kind"] == "cluster" and len(data["clusters"]) == 2
    assert data["workload"]["bucket_bytes"] == 50 * MIB  # the record's buckets in use
    assert (out / "predict.png").stat().st_size > 10_000
    slow = [p for p in data["points"] if "1x25" in p["cluster"] and p["nodes"] == 4][0]
    fast = [p for p in data["points"] if "ib-edr" in p["cluster"] and p["nodes"] == 4][0]
    assert slow["scaling_efficiency"] < fast["scaling_efficiency"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inter", "8x"], "RAILSxGBIT"),
        (["--node-type", "cray-1", "--inter", "tcp-100"], "node type"),
        (["--study", "nope"], "one of hpec2020-today"),
        (["--library", "nvshmem", "--inter", "tcp-100"], "library"),
    ],
)
def test_cli_cluster_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    train = tmp_path / "result.json"
    train.write_text(json.dumps(train_result(ranks=1)))
    proc = fabric_bench("predict", "--train", str(train), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


def test_cli_study_writes_its_answer_and_plot(tmp_path):
    result = CliRunner().invoke(app, ["predict", "--study", "hpec2020-today", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ResNet-50 at 64 nodes" in result.output and "ASSUMED" in result.output
    assert json.loads((tmp_path / "study.json").read_text())["rows"]
    assert (tmp_path / "study.png").stat().st_size > 20_000


def test_a_probe_report_gives_the_levels_and_a_report_without_gpus_is_one_clear_error(tmp_path):
    import dataclasses

    from launch.site.probe import HostFacts, RdmaPort, parse_nvidia_smi_topo, probe_report

    topo = parse_nvidia_smi_topo((PROBE / "topo-6gpu-nv4-2nic" / "nvidia_smi_topo.txt").read_text())
    facts = HostFacts(
        gpu_topology=topo,
        rdma_ports=[
            RdmaPort("mlx5_0", 1, "ACTIVE", "InfiniBand", 100.0, "sysfs"),
            RdmaPort("mlx5_1", 1, "ACTIVE", "InfiniBand", 100.0, "sysfs"),
            RdmaPort("mlx5_2", 1, "DOWN", "InfiniBand", 100.0, "sysfs"),
        ],
    )
    path = tmp_path / "host.json"
    path.write_text(json.dumps(probe_report(facts)))
    intra, inter = cluster.from_probe_report(path)
    assert (intra.gpus, intra.gbit_s, inter.rails, inter.gbit_s, inter.transport) == (6, 800, 2, 100.0, "rdma")
    path.write_text(json.dumps(probe_report(dataclasses.replace(facts, gpu_topology=None))))
    with pytest.raises(UsageError, match="no GPU rows"):
        cluster.from_probe_report(path)
    path.write_text("[]")
    with pytest.raises(UsageError, match="not a `fabric-bench probe --json` report"):
        cluster.from_probe_report(path)
