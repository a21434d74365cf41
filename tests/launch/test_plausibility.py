"""Expected-performance verdict: bands, line rates, GPUDirect asked vs observed; calibrated
on real emulated runs (docs/fabric-truth.md: Is my number normal?)."""

from pathlib import Path

import pytest

from launch.results import plausibility, transport


def allreduce(busbw_by_bytes, rate=1.0, **kw):
    return {
        "benchmark": "allreduce",
        "status": "ok",
        "hosts": ["n0", "n1"],
        "world_size": 2,
        "link_rate_gbit_s": rate,
        "env": {},
        "spec": {},
        "sizes": [{"bytes": b, "busbw_gbit_s": v} for b, v in busbw_by_bytes.items()],
        **kw,
    }


# measured here: fabric-bench run --launcher emulated --nodes 2 --link-rate R --benchmark allreduce
#   --backend torch --max-bytes 67108864 (busbw Gbit/s at 8, 16, 32, 64 MiB)
MEASURED_1G = {2**20: 1.053, 8 * 2**20: 0.901, 16 * 2**20: 0.908, 32 * 2**20: 0.890, 64 * 2**20: 0.910}
MEASURED_5G = {2**20: 3.1, 8 * 2**20: 3.537, 16 * 2**20: 3.352, 32 * 2**20: 2.703, 64 * 2**20: 3.015}


@pytest.mark.parametrize(
    "ratio, band",
    [
        (0.95, "healthy"),
        (0.86, "healthy"),
        (0.7, "below expectation"),
        (0.2, "suspect: check the transport"),
        (1.3, "suspect: faster than the line rate"),
    ],
)
def test_bands(ratio, band):
    assert plausibility.band(ratio) == band


def test_calibration_runs_fall_in_the_expected_bands():
    healthy = plausibility.verdict(allreduce(MEASURED_1G, 1.0))
    assert healthy["verdict"] == "healthy" and 0.89 <= healthy["ratio"] <= 0.91
    assert healthy["message_bytes"] == [16 * 2**20, 32 * 2**20, 64 * 2**20]  # the top three sizes
    cpu_bound = plausibility.verdict(allreduce(MEASURED_5G, 5.0))
    assert cpu_bound["verdict"] == "below expectation"


def test_no_line_rate_is_unknown_never_healthy(tmp_path):
    result = allreduce(MEASURED_1G, rate=None, env={"NCCL_SOCKET_IFNAME": "nosuch0"})
    verdict = plausibility.verdict(result, root=tmp_path)
    assert verdict["verdict"] == "unknown" and verdict["link_rate_gbit_s"] is None


def test_line_rate_from_the_site_file_and_from_sysfs(tmp_path):
    assert plausibility.line_rate(allreduce({}, rate=None), site_link_gbit_s=100)[0] == 100.0
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    rate, source = plausibility.line_rate(allreduce({}, rate=None, env={"NCCL_IB_HCA": "=mlx5_0"}), root=tmp_path)
    assert rate == 200.0 and "mlx5_0 port 1" in source


def test_one_host_is_not_applicable():
    result = allreduce(MEASURED_1G, rate=None, hosts=["vm"])
    assert plausibility.verdict(result)["verdict"] == "not applicable"


def test_gpudirect_asked_on_but_nccl_ran_without_it_is_suspect():
    """NVIDIA/nccl#1676: GPUDirect RDMA silently off after an OS upgrade."""
    log = "g:1:1 [0] NCCL INFO Using network IB\ng:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0\n"
    result = allreduce(
        {64 * 2**20: 190.0}, rate=200.0, spec={"gpudirect": "on"}, transport={"observed": transport.observe(log)}
    )
    verdict = plausibility.verdict(result)
    assert verdict["gpudirect"] == {"asked": "on", "observed": "off", "ok": False}
    assert verdict["verdict"] == "suspect: check the transport"


def test_gpudirect_on_in_a_recorded_log_agrees():
    log = (Path(__file__).parents[1] / "data" / "nccl" / "ib-gdrdma-a100" / "nccl_info.log").read_text()
    result = allreduce(
        {64 * 2**20: 180.0}, rate=200.0, spec={"gpudirect": "on"}, transport={"observed": transport.observe(log)}
    )
    assert plausibility.verdict(result)["gpudirect"]["ok"] is True


def test_training_estimate_is_an_upper_bound():
    train = {
        "benchmark": "train",
        "status": "ok",
        "hosts": ["n0", "n1"],
        "world_size": 2,
        "link_rate_gbit_s": 1.0,
        "env": {},
        "spec": {"batch_size": 16},
        "gradient_bytes": 46_000_000,
        "throughput": {"total_img_per_s": 20.0},
        "compute_img_per_s": 40.0,
    }
    verdict = plausibility.verdict(train)
    # step 1.6 s, compute 0.8 s: 0.8 s exposed for 46 MB -> 0.46 Gbit/s busbw: below the band
    assert verdict["verdict"] == "suspect: check the transport" and verdict["busbw_gbit_s"] == pytest.approx(0.46)
    fast = {**train, "compute_img_per_s": 21.0}
    assert plausibility.verdict(fast)["verdict"] == "no sign of trouble"


def test_an_eight_rail_node_is_held_to_eight_nics_not_one():
    """A healthy 2-node allreduce on 8 GPUs x 8 NICs of 400 Gbit/s reaches a busbw near 8 x one
    NIC's; against one NIC's line rate it read 'faster than the line rate' (issue 29, item 7)."""
    rails = {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))}
    # what results carry: the spec's ranks and nodes (tests/launch/test_ranks_per_node.py makes them
    # through the bundle's own path)
    result = allreduce({64 * 2**20: 2900.0}, rate=None, env=rails, spec={"ranks": 16, "nodes": 2}, world_size=16)
    verdict = plausibility.verdict(result, site_link_gbit_s=400)
    assert verdict["rails"] == 8 and verdict["node_rate_gbit_s"] == 3200
    assert verdict["verdict"] == "healthy" and verdict["ratio"] == pytest.approx(2900 / 3200)
    # one rank per node drives one of those rails: the same figure is then impossible
    one_rank = allreduce({64 * 2**20: 2900.0}, rate=None, env=rails, spec={"ranks": 2, "nodes": 2})
    assert plausibility.verdict(one_rank, site_link_gbit_s=400)["verdict"] == "suspect: faster than the line rate"


def test_the_nics_nccl_used_count_over_what_the_site_lists():
    observed = transport.observe(
        (Path(__file__).parents[1] / "data" / "nccl" / "ib-gdrdma-a100" / "nccl_info.log").read_text()
    )
    result = allreduce(
        {},
        rate=None,
        env={"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))},
        spec={"ranks": 16, "nodes": 2},
        world_size=16,
        transport={"observed": observed},
    )
    assert plausibility.rails_in_use(result) == (4, "NICs NCCL used (its log)")


def test_the_top_sizes_of_an_nccl_sweep_are_judged_not_the_middle_ones():
    """Issue 42, item 3: on 8 x 400G nodes NCCL reaches a quarter to half of the line rate at 8-256 MiB
    and nears it only at GiB sizes. The rows are the shape the issue describes (not a measurement): the
    median over every size >= 8 MiB read 'below expectation'; the top three sizes are judged."""
    node = 8 * 400.0
    sweep = {
        8 * 2**20: 0.25 * node,
        64 * 2**20: 0.35 * node,
        256 * 2**20: 0.5 * node,
        2**30: 0.7 * node,
        2 * 2**30: 0.88 * node,
        4 * 2**30: 0.9 * node,
        8 * 2**30: 0.91 * node,
    }
    rails = {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))}
    result = allreduce(sweep, rate=None, env=rails, spec={"ranks": 16, "nodes": 2}, world_size=16)
    verdict = plausibility.verdict(result, site_link_gbit_s=400)
    assert verdict["message_bytes"] == [2 * 2**30, 4 * 2**30, 8 * 2**30]
    assert verdict["verdict"] == "healthy" and verdict["ratio"] == pytest.approx(0.9)
    cut = {size: busbw for size, busbw in sweep.items() if size <= 256 * 2**20}  # the old 256 MiB top
    assert (
        plausibility.verdict(
            allreduce(cut, rate=None, env=rails, spec={"ranks": 16, "nodes": 2}, world_size=16), site_link_gbit_s=400
        )["verdict"]
        != "healthy"
    )
