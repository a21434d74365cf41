"""A GPU rank keeps to the CPUs next to its GPU (issue 49, item 5): its CPU set narrowed to the
GPU's PCI local_cpulist within what the launcher gave it, never widened; the placement check
flags a GPU rank whose CPUs reach beyond its GPU's. The sysfs trees are plain data: a two-socket
host whose GPU numbering does not follow the sockets (GPU 0 on socket 1)."""

from __future__ import annotations

from pathlib import Path

from bench import placement

SOCKETS = {0: "0-7", 1: "8-15"}
GPUS = {"0000:c1:00.0": 1, "0000:41:00.0": 0}  # GPU 0 sits on socket 1, GPU 1 on socket 0


def host(root: Path) -> Path:
    for bus, socket in GPUS.items():
        device = root / "sys/bus/pci/devices" / bus
        device.mkdir(parents=True)
        (device / "local_cpulist").write_text(SOCKETS[socket] + "\n")
        (device / "numa_node").write_text(f"{socket}\n")
    return root


def gpu(index: int, bus: str) -> dict:
    return {"index": index, "pci_bus": bus}


def test_a_rank_given_the_whole_node_narrows_to_its_gpu_s_socket(tmp_path):
    root, calls = host(tmp_path), []
    done = placement.pin_near_gpu(gpu(0, "0000:c1:00.0"), root, list(range(16)), lambda pid, cpus: calls.append(cpus))
    assert done == {"pinned": True, "cpus": "8-15"} and calls == [set(range(8, 16))]


def test_never_widened_and_never_moved_off_the_launcher_s_cpus(tmp_path):
    root, calls = host(tmp_path), []
    within = placement.pin_near_gpu(gpu(1, "0000:41:00.0"), root, [2, 3], lambda pid, cpus: calls.append(cpus))
    assert within == {"pinned": True, "cpus": "2-3"} and calls == []  # already there: nothing to set
    away = placement.pin_near_gpu(gpu(0, "0000:c1:00.0"), root, [2, 3], lambda pid, cpus: calls.append(cpus))
    assert away["pinned"] is False and "none of the launcher's CPUs (2-3)" in away["why"] and calls == []
    unknown = placement.pin_near_gpu(gpu(2, "0000:99:00.0"), root, [2, 3], lambda pid, cpus: calls.append(cpus))
    assert unknown["pinned"] is False and "no local_cpulist" in unknown["why"] and calls == []


def test_a_gpu_rank_whose_cpus_reach_beyond_its_gpu_s_is_flagged(tmp_path):
    def record(rank: int, cpus: str, local: str, pinned: bool) -> dict:
        gpu_place = {"index": rank, "numa_node": None, "local_cpus": local}
        return {
            "kind": "train",
            "rank": rank,
            "host": "n0",
            "placement": {"cpus": cpus, "pinned": pinned, "gpu": gpu_place},
        }

    # rank 0 kept to GPU 0's socket; rank 1 floats over both sockets (its GPU is on socket 0)
    found = placement.flags([record(0, "8-15", "8-15", True), record(1, "0-15", "0-7", False)])
    assert [(p["rank"], p["problem"]) for p in found["problems"]] == [(1, "cpus_far_from_gpu")]
