"""Rank placement: read on this host for real, and on copied sysfs trees of other layouts."""
from pathlib import Path

from bench import placement


def test_cpu_list_round_trip():
    assert placement.cpu_list_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert placement.parse_cpu_list("0-2,5,7-8") == [0, 1, 2, 5, 7, 8]


def test_this_host_placement_is_read_not_assumed():
    place = placement.rank_placement(0, gpu=True, env={"GLOO_SOCKET_IFNAME": "lo"})
    assert place["cpu_count"] >= 1 and place["cpus"]
    assert place["numa_nodes"] is None or 0 in place["numa_nodes"] or place["numa_nodes"]
    # no GPU / nvidia-smi here: unknown with the reason, never a made-up GPU
    if place["gpu"]["numa_node"] is None:
        assert place["gpu"]["unknown"]
    # lo is virtual: its NUMA node is unknown
    assert place["nic"]["name"] == "lo" and place["nic"]["numa_node"] is None and place["nic"]["unknown"]


def test_traffic_nic_follows_the_selection_variables():
    assert placement.traffic_nic({"NCCL_IB_HCA": "=mlx5_1,mlx5_2", "NCCL_SOCKET_IFNAME": "ib0"}) == \
        ("mlx5_1", "NCCL_IB_HCA")
    assert placement.traffic_nic({"UCX_NET_DEVICES": "mlx5_0:1"}) == ("mlx5_0", "UCX_NET_DEVICES")
    assert placement.traffic_nic({"NCCL_SOCKET_IFNAME": "^docker", "GLOO_SOCKET_IFNAME": "eth0"}) == \
        ("eth0", "GLOO_SOCKET_IFNAME")


def fake_node(root: Path, gpu_numa: int, nic_numa: int) -> None:
    """A two-socket sysfs: CPUs 0-3 on node 0, 4-7 on node 1, a GPU and an mlx5 HCA."""
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (root / f"sys/devices/system/node/node{node}").mkdir(parents=True)
        (root / f"sys/devices/system/node/node{node}/cpulist").write_text(cpus + "\n")
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-7\n")
    gpu = root / "sys/bus/pci/devices/0000:07:00.0"
    gpu.mkdir(parents=True)
    (gpu / "numa_node").write_text(f"{gpu_numa}\n")
    hca_pci = root / "sys/devices/pci0000:80/0000:81:00.0"
    hca_pci.mkdir(parents=True)
    (hca_pci / "numa_node").write_text(f"{nic_numa}\n")
    (root / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (root / "sys/class/infiniband/mlx5_0/device").symlink_to(hca_pci)


def smi(argv):
    return "0, 00000000:07:00.0\n"


def test_far_numa_nic_is_flagged(tmp_path):
    """nccl-tests#350: the rank's NIC on the other socket from its GPU."""
    fake_node(tmp_path, gpu_numa=0, nic_numa=1)
    env = {"NCCL_IB_HCA": "mlx5_0", "CUDA_VISIBLE_DEVICES": "0"}
    place = placement.rank_placement(0, True, env=env, root=tmp_path, run=smi, affinity=[0, 1, 2, 3])
    assert place["numa_nodes"] == [0] and place["pinned"] is True
    assert place["gpu"] == {"index": 0, "pci_bus": "0000:07:00.0", "numa_node": 0}
    assert place["nic"]["name"] == "mlx5_0" and place["nic"]["numa_node"] == 1
    result = placement.flags([{"kind": "train", "rank": 0, "host": "n1", "placement": place}])
    assert result["verdict"] == "flagged"
    [problem] = result["problems"]
    assert problem["problem"] == "gpu_nic_numa_mismatch" and "NUMA node 1" in problem["detail"]


def test_near_nic_is_ok(tmp_path):
    fake_node(tmp_path, gpu_numa=1, nic_numa=1)
    place = placement.rank_placement(0, True, env={"NCCL_IB_HCA": "mlx5_0"}, root=tmp_path, run=smi,
                                     affinity=[4, 5])
    assert placement.flags([{"kind": "train", "rank": 0, "host": "n1", "placement": place}])["verdict"] == "ok"


def test_pinned_ranks_sharing_cores_are_flagged_unpinned_are_not():
    def rec(rank, cpus, pinned, host="n1"):
        return {"kind": "train", "rank": rank, "host": host,
                "placement": {"cpus": cpus, "pinned": pinned, "gpu": None, "nic": {"name": "eth0", "numa_node": None}}}
    shared = placement.flags([rec(0, "0-1", True), rec(1, "1-2", True)])
    assert [p["problem"] for p in shared["problems"]] == ["shared_cores"]
    assert "CPUs 1" in shared["problems"][0]["detail"]
    assert placement.flags([rec(0, "0-7", False), rec(1, "0-7", False)])["problems"] == []
    assert placement.flags([rec(0, "0-1", True), rec(1, "0-1", True, host="n2")])["problems"] == []
    assert placement.flags([])["verdict"] == "unknown"
