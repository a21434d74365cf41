"""NCCL's in-switch algorithms (NVLS, NVLSTree) read from recorded logs (tests/data/nccl/nvls-*,
SOURCE.md there), recorded in the transport evidence, and a busbw above the line-rate model not
flagged where NCCL set one up and the run's NCCL_ALGO leaves it free to choose it (issue 49)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.results import plausibility, transport

RECORDED = Path(__file__).resolve().parents[1] / "data" / "nccl"


def observed(name: str) -> dict:
    return transport.observe((RECORDED / name / "nccl_info.log").read_text())


def allreduce_result(busbw_gbit_s: float, log: str, env: dict | None = None, hosts=("n0", "n1")) -> dict:
    """A 2-node NCCL allreduce of 8 GPUs per node over 8 x 400G rails; its transport from `log`."""
    return {
        "benchmark": "allreduce",
        "status": "ok",
        "hosts": list(hosts),
        "world_size": 16,
        "env": env or {},
        "spec": {"gpus_per_node": 8, "nodes": 2},
        "sizes": [{"bytes": 2**30, "busbw_gbit_s": busbw_gbit_s}],
        "transport": {"observed": observed(log)},
    }


def test_recorded_logs_name_the_algorithms_nccl_set_up():
    one_node, two_nodes = observed("nvls-one-node"), observed("nvls-tree-two-nodes")
    assert one_node["nccl"]["algorithms"] == ["NVLS"] and two_nodes["nccl"]["algorithms"] == ["NVLSTree"]
    # one evidence line per algorithm, however many ranks printed theirs
    assert sum("NVLS comm" in line for line in one_node["lines"]) == 1
    assert sum("NVLS Head" in line for line in two_nodes["lines"]) == 1
    for name in ("ib-gdrdma-a100", "ofi-efa-gdrdma", "socket-lo-two-gpus"):
        assert observed(name)["nccl"]["algorithms"] == [], name


def test_busbw_above_the_model_is_no_sign_of_trouble_where_nccl_set_up_nvls_tree():
    # 8 rails x 400 Gbit/s per node; NVLSTree's busbw above it, e.g. 1.2 x
    fast = allreduce_result(
        1.2 * 8 * 400, "nvls-tree-two-nodes", env={"NCCL_IB_HCA": ",".join(f"mlx5_{i}" for i in range(8))}
    )
    verdict = plausibility.verdict(fast, site_link_gbit_s=400)
    assert verdict["rails"] == 8 and verdict["ratio"] == pytest.approx(1.2)
    assert verdict["verdict"] == "no sign of trouble" and verdict["in_switch_algorithms"] == ["NVLSTree"]
    assert "NVLSTree" in verdict["why"] and "by design" in verdict["why"]
    # the same figure without an in-switch algorithm in the log is flagged, as before
    plain = allreduce_result(1.2 * 8 * 400, "ib-gdrdma-a100", env=fast["env"])
    assert plausibility.verdict(plain, site_link_gbit_s=400)["verdict"] == "suspect: faster than the line rate"
    # a low figure is judged as ever: an in-switch algorithm excuses no shortfall
    slow = allreduce_result(0.3 * 8 * 400, "nvls-tree-two-nodes", env=fast["env"])
    assert plausibility.verdict(slow, site_link_gbit_s=400)["verdict"] == "suspect: check the transport"


@pytest.mark.parametrize(
    "algo, free",
    [
        (None, True),
        ("", True),
        ("Ring,Tree", False),  # the post's log set NVLSTree up; a run that asks for ring/tree does not use it
        ("Ring,NVLSTree", True),
        ("^NVLSTree", False),
        ("^NVLS", True),
        ("allreduce:tree;broadcast:ring", False),
        ("allreduce:nvlstree,ring;broadcast:ring", True),
        ("broadcast:ring", True),  # the allreduce keeps its choice
    ],
)
def test_nccl_algo_decides_whether_the_algorithm_set_up_was_free_to_run(algo, free):
    env = {"NCCL_ALGO": algo} if algo is not None else {}
    result = allreduce_result(1.2 * 400, "nvls-tree-two-nodes", env=env)
    assert plausibility.nccl_algo_allows(algo, "NVLSTree") is free
    assert plausibility.in_switch_algorithms(result) == (["NVLSTree"] if free else [])
    verdict = plausibility.verdict(result, site_link_gbit_s=400)
    assert verdict["verdict"] == ("no sign of trouble" if free else "suspect: faster than the line rate")


def test_one_node_with_nvls_is_not_applicable_but_its_algorithm_is_recorded(tmp_path):
    result = allreduce_result(1.5 * 400, "nvls-one-node", hosts=("hw14",))
    assert plausibility.verdict(result, site_link_gbit_s=400)["verdict"] == "not applicable"
    log = tmp_path / "output.log"
    log.write_text((RECORDED / "nvls-one-node" / "nccl_info.log").read_text())
    found = transport.evidence({"spec": {"gpus_per_node": 8}, "env": {}}, log)
    assert found["observed"]["nccl"]["algorithms"] == ["NVLS"]


@pytest.mark.parametrize(
    "ratio, world, verdict",
    [
        (1.8, 16, "no sign of trouble"),  # below 2(n-1)/n = 1.875 for 16 ranks
        (2.1, 16, "suspect: faster than the line rate"),  # above even the in-switch ceiling
        (1.2, 2, "suspect: faster than the line rate"),  # 2 ranks: 2(n-1)/n = 1, no room above the model
    ],
)
def test_an_in_switch_algorithm_lifts_the_ceiling_to_2_n_minus_1_over_n(ratio, world, verdict):
    rails = {"NCCL_IB_HCA": ",".join(f"mlx5_{i}" for i in range(8))}
    result = allreduce_result(ratio * 8 * 400, "nvls-tree-two-nodes", env=rails)
    result["world_size"] = world
    judged = plausibility.verdict(result, site_link_gbit_s=400)
    assert judged["in_switch_ceiling"] == pytest.approx(2 * (world - 1) / world)
    assert judged["verdict"] == verdict
    if verdict != "no sign of trouble":
        assert "above even NVLSTree's ceiling" in judged["why"]


def test_collnet_tried_but_not_set_up_lifts_nothing():
    # NVIDIA/nccl#1219: CollNet channels connected, then the SHARP group failed; nccl-tests#133:
    # NCCL_ALGO=COLLNET ignored. Neither log sets an in-switch algorithm up: a busbw above the
    # model stays flagged, and the warnings are kept in the evidence
    failed, ignored = observed("collnet-sharp-group-failed"), observed("collnet-unsupported-ignored")
    assert failed["nccl"]["algorithms"] == [] and ignored["nccl"]["algorithms"] == []
    assert failed["nccl"]["collnet_channels"] == ["COLLNET/SHARP/5/GDRDMA"]
    assert failed["nccl"]["in_switch_warnings"] == ["SHARP group create: Streaming Tree lock failed (-18)"]
    assert ignored["nccl"]["in_switch_warnings"] == [
        "CollNet is not supported or fails to initialize, ignoring NCCL_ALGO=COLLNET"
    ]
    result = allreduce_result(1.5 * 400, "collnet-unsupported-ignored", env={"NCCL_ALGO": "COLLNET"})
    judged = plausibility.verdict(result, site_link_gbit_s=400)
    assert judged["verdict"] == "suspect: faster than the line rate" and "in_switch_algorithms" not in judged


@pytest.mark.parametrize(
    "algo, free",
    [
        (None, True),
        ("CollnetDirect", True),
        ("Ring,CollnetChain", True),
        ("^CollnetChain", True),
        ("^CollnetDirect,CollnetChain", False),
        ("^CollNet", False),
        ("Ring,Tree", False),
    ],
)
def test_nccl_algo_names_collnet_by_its_variants(algo, free):
    assert plausibility.nccl_algo_allows(algo, "CollNet") is free
