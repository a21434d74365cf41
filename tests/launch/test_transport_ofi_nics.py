"""The NIC each rank's NCCL traffic used, read from every NET network's channel lines (IB, Socket,
OFI), not only NET/IB: an EFA or Slingshot run's rank is no longer judged by its socket interface's
NUMA node (a false far-NUMA flag, issue 49). Logs: tests/data/nccl (SOURCE.md in each folder)."""

from __future__ import annotations

from pathlib import Path

from bench import placement
from launch.results import transport

RECORDED = Path(__file__).resolve().parents[1] / "data" / "nccl"


def log(name: str) -> str:
    return (RECORDED / name / "nccl_info.log").read_text()


def efa_host(root: Path, nics: dict[str, tuple[str, int]], gpu_bus: str, gpu_numa: int) -> None:
    """A two-socket host in sysfs: eth0 (the socket interface) on NUMA node 0, EFA devices by
    name -> (PCI address, NUMA node), and the GPU's PCI device. This layout is the test's premise."""
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (root / f"sys/devices/system/node/node{node}").mkdir(parents=True)
        (root / f"sys/devices/system/node/node{node}/cpulist").write_text(cpus + "\n")
    eth = root / "sys/devices/pci0000:00/0000:00:05.0"
    eth.mkdir(parents=True)
    (eth / "numa_node").write_text("0\n")
    (root / "sys/class/net/eth0").mkdir(parents=True)
    (root / "sys/class/net/eth0/device").symlink_to(eth)
    for name, (bus, numa) in nics.items():
        pci = root / f"sys/devices/pci0000:{bus[5:7]}" / bus
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{numa}\n")
        (root / "sys/class/infiniband" / name).mkdir(parents=True)
        (root / "sys/class/infiniband" / name / "device").symlink_to(pci)
    (root / "sys/bus/pci/devices" / gpu_bus).mkdir(parents=True)
    (root / "sys/bus/pci/devices" / gpu_bus / "numa_node").write_text(f"{gpu_numa}\n")


def rank_record(root: Path, rank: int, gpu_bus: str) -> dict:
    place = placement.rank_placement(
        0,
        True,
        env={"NCCL_SOCKET_IFNAME": "eth0", "FI_PROVIDER": "efa"},
        root=root,
        run=lambda argv: f"0, {gpu_bus}\n",
        affinity=[4, 5, 6, 7],
    )
    return {"kind": "train", "rank": rank, "host": "algo-1", "placement": place}


def test_ofi_channel_lines_give_each_rank_its_net_device():
    # aws-ofi-nccl's channels, PXN and shared ones included: rank -> the NET devices it used
    assert transport.nccl_rank_nics(log("ofi-efa-pxn-shared")) == {
        2: ["AWS Libfabric/0", "AWS Libfabric/1"],
        3: ["AWS Libfabric/1"],
        5: ["AWS Libfabric/1"],
    }
    assert transport.nccl_rank_nics(log("ofi-efa-gdrdma")) == {1: ["AWS Libfabric/1"]}
    assert transport.nccl_rank_nics(log("socket-channels-ibext-fallback")) == {15: ["Socket/3"]}
    # the NET device's NICs, where the plugin lists them: NIC group <dev> by PCI address
    names = transport.nccl_device_names(log("ofi-efa-libfabric"))
    assert names[("8h200-2", "6831")] == {"OFI": {7: ["0000:a3:00.0", "0000:a2:00.0"]}}
    assert names[("8h200-3", "6310")]["OFI"][0] == ["0000:56:00.0", "0000:55:00.0"]
    # IB as before: the process's own "NET/IB : Using" list names each device
    assert transport.nccl_rank_nics(log("ib-gdrdma-a100"))[0] == ["mlx5_12", "mlx5_14"]


def test_an_efa_rank_is_not_judged_by_its_socket_interface(tmp_path):
    """GPU on NUMA node 1, eth0 (NCCL_SOCKET_IFNAME) on node 0: judged by eth0 the rank was flagged
    far-NUMA although its traffic went over EFA; with its OFI channels its NIC is the NET device
    NCCL used, whose place the log does not give: unknown, not flagged."""
    efa_host(tmp_path, {}, "0000:97:00.0", gpu_numa=1)
    records = [rank_record(tmp_path, rank, "0000:97:00.0") for rank in (2, 3)]
    assert records[0]["placement"]["nic"]["name"] == "eth0"
    before = placement.flags(records)
    assert {p["problem"] for p in before["problems"]} == {"gpu_nic_numa_mismatch"}  # the false flag
    judged = placement.flags(records, transport.nccl_rank_nics(log("ofi-efa-pxn-shared")))
    assert judged["problems"] == [] and judged["verdict"] == "unknown"
    assert judged["ranks"][1]["nic"]["name"] == "AWS Libfabric/1"
    assert judged["ranks"][1]["nic"]["source"] == "NCCL's channel lines (NET/<network>/<dev>)"


def test_an_ofi_nic_group_is_placed_by_the_pci_addresses_the_plugin_printed(tmp_path):
    """The NIC group of NET device 7 (8h200-2's recorded lines) on this premise's sysfs: its two EFA
    devices on NUMA node 1, beside the GPU: ok; the GPU on node 0: flagged."""
    group = transport.nccl_device_names(log("ofi-efa-libfabric"))[("8h200-2", "6831")]["OFI"][7]
    efa_host(
        tmp_path, {"rdmap163s0": ("0000:a3:00.0", 1), "rdmap162s0": ("0000:a2:00.0", 1)}, "0000:97:00.0", gpu_numa=1
    )
    record = rank_record(tmp_path, 0, "0000:97:00.0")
    assert {n["pci_bus"]: n["numa_node"] for n in record["placement"]["fabric_nics"]} == {
        "0000:a2:00.0": 1,
        "0000:a3:00.0": 1,
    }
    judged = placement.flags([record], {0: group})
    assert judged["verdict"] == "ok" and judged["ranks"][0]["nic"]["numa_node"] == 1
    record["placement"]["gpu"]["numa_node"] = 0
    (flagged,) = placement.flags([record], {0: group})["problems"]
    assert flagged["problem"] == "gpu_nic_numa_mismatch" and "NUMA node 1" in flagged["detail"]
