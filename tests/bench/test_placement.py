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
    assert placement.traffic_nic({"NCCL_IB_HCA": "=mlx5_1,mlx5_2", "NCCL_SOCKET_IFNAME": "ib0"}) == (
        "mlx5_1",
        "NCCL_IB_HCA",
    )
    assert placement.traffic_nic({"UCX_NET_DEVICES": "mlx5_0:1"}) == ("mlx5_0", "UCX_NET_DEVICES")
    assert placement.traffic_nic({"NCCL_SOCKET_IFNAME": "^docker", "GLOO_SOCKET_IFNAME": "eth0"}) == (
        "eth0",
        "GLOO_SOCKET_IFNAME",
    )


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
    place = placement.rank_placement(0, True, env={"NCCL_IB_HCA": "mlx5_0"}, root=tmp_path, run=smi, affinity=[4, 5])
    assert placement.flags([{"kind": "train", "rank": 0, "host": "n1", "placement": place}])["verdict"] == "ok"


def test_pinned_ranks_sharing_cores_are_flagged_unpinned_are_not():
    def rec(rank, cpus, pinned, host="n1"):
        return {
            "kind": "train",
            "rank": rank,
            "host": host,
            "placement": {"cpus": cpus, "pinned": pinned, "gpu": None, "nic": {"name": "eth0", "numa_node": None}},
        }

    shared = placement.flags([rec(0, "0-1", True), rec(1, "1-2", True)])
    assert [p["problem"] for p in shared["problems"]] == ["shared_cores"]
    assert "CPUs 1" in shared["problems"][0]["detail"]
    assert placement.flags([rec(0, "0-7", False), rec(1, "0-7", False)])["problems"] == []
    assert placement.flags([rec(0, "0-1", True), rec(1, "0-1", True, host="n2")])["problems"] == []
    assert placement.flags([])["verdict"] == "unknown"


A100_LOG = Path(__file__).parents[1] / "data" / "nccl" / "ib-gdrdma-a100" / "nccl_info.log"
A100_RAILS = ("mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11", "mlx5_12", "mlx5_14", "mlx5_15")


def two_socket_rails(root: Path, gpu_numa: dict[str, int], nic_numa: dict[str, int]) -> None:
    """A two-socket sysfs with GPUs (PCI bus -> NUMA node) and HCAs (name -> NUMA node)."""
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (root / f"sys/devices/system/node/node{node}").mkdir(parents=True)
        (root / f"sys/devices/system/node/node{node}/cpulist").write_text(cpus + "\n")
    for bus, numa in gpu_numa.items():
        (root / "sys/bus/pci/devices" / bus).mkdir(parents=True)
        (root / "sys/bus/pci/devices" / bus / "numa_node").write_text(f"{numa}\n")
    for i, (name, numa) in enumerate(nic_numa.items()):
        pci = root / f"sys/devices/pci0000:{i:02x}/0000:{i:02x}:00.0"
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{numa}\n")
        (root / "sys/class/infiniband" / name).mkdir(parents=True)
        (root / "sys/class/infiniband" / name / "device").symlink_to(pci)


def test_each_rank_is_judged_by_the_nic_nccls_own_lines_gave_it(tmp_path):
    """Issue 42, item 7. The NCCL log is the real one of a 4 x A100 host (tests/data/nccl/
    ib-gdrdma-a100/SOURCE.md): ranks 0 and 1 use mlx5_12/mlx5_14, ranks 2 and 3 mlx5_10/mlx5_8.
    The NUMA layout is this test's premise (not in the log): GPUs 0-1 and mlx5_12.. on socket 1,
    GPUs 2-3 and mlx5_8..mlx5_11 on socket 0. Taking the first NCCL_IB_HCA entry (mlx5_8) as every
    rank's NIC flagged ranks 0 and 1 as far-NUMA; their own NICs sit beside their GPUs."""
    from launch.results.transport import nccl_rank_nics

    buses = [f"0000:{b}:00.0" for b in ("07", "0f", "47", "4e")]
    two_socket_rails(
        tmp_path,
        dict(zip(buses, (1, 1, 0, 0))),
        {name: (0 if name in ("mlx5_8", "mlx5_9", "mlx5_10", "mlx5_11") else 1) for name in A100_RAILS},
    )
    env = {"NCCL_IB_HCA": "=" + ",".join(A100_RAILS), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    records = []
    for rank in range(4):
        place = placement.rank_placement(
            rank,
            True,
            env=env,
            root=tmp_path,
            affinity=[0, 1, 2, 3, 4, 5, 6, 7],
            run=lambda argv, r=rank: f"{r}, 0000{buses[r]}\n",
        )
        assert place["nic"]["name"] == "mlx5_8" and len(place["listed_nics"]) == len(A100_RAILS)
        records.append({"kind": "train", "rank": rank, "host": "10-90-43-152", "placement": place})
    first_entry = placement.flags(records)
    assert sorted(p["rank"] for p in first_entry["problems"]) == [0, 1]  # the false mismatch
    rank_nics = nccl_rank_nics(A100_LOG.read_text())
    assert rank_nics == {0: ["mlx5_12", "mlx5_14"], 1: ["mlx5_14"], 2: ["mlx5_10"], 3: ["mlx5_10", "mlx5_8"]}
    judged = placement.flags(records, rank_nics)
    assert judged["problems"] == [] and judged["verdict"] == "ok"
    assert judged["ranks"][0]["nic"]["name"] == "mlx5_12,mlx5_14" and judged["ranks"][0]["nic"]["numa_node"] == 1
    # a rank whose GPU is on socket 1 but whose NCCL NIC is on socket 0 is still flagged
    records[2]["placement"]["gpu"]["numa_node"] = 1
    (flagged,) = placement.flags(records, rank_nics)["problems"]
    assert flagged["rank"] == 2 and "NIC mlx5_10 on NUMA node 0" in flagged["detail"]


def test_nccl_nics_are_read_from_every_recorded_channel_format():
    from launch.results.transport import nccl_rank_nics

    data = A100_LOG.parents[1]
    assert nccl_rank_nics((data / "ring-format-roce" / "nccl_info.log").read_text()) == {0: ["mlx5_0"]}  # NCCL <= 2.5
    # a merged virtual NIC of the RDMA plugin (IBext_v8): its two ports
    assert nccl_rank_nics((data / "ibext-roce-sharp-plugin" / "nccl_info.log").read_text()) == {2: ["mlx5_0+mlx5_1"]}
    assert nccl_rank_nics((data / "socket-lo-two-gpus" / "nccl_info.log").read_text()) == {}
