"""The system description and its completeness score (launch.site.system_description): what a
reviewer needs, read from a result, its site file and the system description that travelled with it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from launch.results.result import read
from launch.site.config import Site, load_site
from launch.site.probe.facts import HostFacts, Nic
from launch.site.system_description import (
    COMPLETE_FROM,
    MAX_TEXT,
    NEEDS,
    describe,
    description_of,
    firmware_from_ibv_devinfo,
    firmware_from_sysfs,
    system_fields,
)
from tests.conftest import REPO

# a real result: an MPI allreduce under Slurm across two emulated nodes (its SOURCE.md says how)
RECORDED = REPO / "tests/data/node_samplers/slow-node/result.json"
ALONE_MISSING = ["network_interfaces", "nic_firmware", "drivers", "topology", "placement", "processors_memory"]


def site_file(tmp_path: Path) -> Site:
    path = tmp_path / "site.toml"
    path.write_text('[fabrics.ethernet]\ninterface = "fbemu0"\nlink_gbit_s = 0.3\n')
    return load_site(path)


def test_the_table_of_needs_has_unique_names_and_weights_that_sum_to_one() -> None:
    names = [need.name for need in NEEDS]
    assert len(set(names)) == len(names)
    assert math.isclose(sum(need.weight for need in NEEDS), 1.0)
    assert all(0 < need.weight < 1 and need.tells for need in NEEDS)


def test_the_docs_list_every_field_with_its_weight() -> None:
    text = (REPO / "docs/sharing.md").read_text()
    section = text.split("## The system description and its score", 1)[1].split("\n## ", 1)[0]
    listed = {name: int(weight) for name, weight in re.findall(r"^\| `(\w+)` \| (\d+) % \|", section, re.M)}
    assert listed == {need.name: round(need.weight * 100) for need in NEEDS}
    assert f"{COMPLETE_FROM:.0%}".replace("%", " %") in section


def test_a_recorded_result_alone_tells_its_fabric_and_transport_but_not_its_hosts() -> None:
    description = description_of(read(RECORDED))
    assert description.missing == ALONE_MISSING
    assert description.score == pytest.approx(0.55) and not description.complete
    assert description.found["fabric"] == ("ethernet", "result")
    assert description.found["line_rate"] == ("0.3 Gbit/s (site file link_gbit_s)", "result")
    transport = description.found["transport_evidence"]
    assert transport is not None and "mpi.btl tcp" in transport[0]
    assert description.words() == f"incomplete description (55%): missing {', '.join(ALONE_MISSING)}"


def test_the_site_file_and_the_system_description_fill_in_what_the_result_cannot_know(tmp_path: Path) -> None:
    system = {
        "host_network_drivers": "fbemu0 veth",
        "host_network_firmware": "none: virtual interfaces",
        "host_networking_topology": "two nodes on one emulated switch",
        "host_processor_model_name": "Intel Xeon",
        "host_memory_capacity": "24 GiB",
    }
    description = description_of(read(RECORDED), site=site_file(tmp_path), system=system)
    assert description.found["network_interfaces"] == ("fbemu0", "site file")
    assert description.found["topology"] == ("two nodes on one emulated switch", "system description")
    assert description.missing == ["placement"]
    assert description.score == pytest.approx(0.90) and description.complete
    assert description.words() == "complete description (90%)"


def test_the_site_file_travels_inside_the_system_description(tmp_path: Path) -> None:
    system = describe(HostFacts(), [], {}, system_name="site-a", site=site_file(tmp_path), root=tmp_path)
    description = description_of(read(RECORDED), system=json.loads(json.dumps(system)))
    assert description.found["network_interfaces"] == ("fbemu0", "site file (in the system description)")
    assert description.found["line_rate"] == ("0.3 Gbit/s (site file link_gbit_s)", "result")  # the result first
    odd = {"interface": ["eth0"], "devices": "mlx5_0", "link_gbit_s": float("nan")}
    hostile = {"site_file": {"fabrics": {"ethernet": odd}}}
    assert description_of(read(RECORDED), system=hostile).found["network_interfaces"] is None


def test_a_result_that_is_not_of_its_shapes_has_an_empty_description() -> None:
    description = description_of({"run_id": "x", "world_size": "two"})
    assert description.score == 0 and description.missing == [need.name for need in NEEDS]


def test_another_sites_system_description_is_read_as_bounded_text_only() -> None:
    kept = system_fields(
        {
            "host_processor_model_name": "x" * 10_000,
            "host_memory_capacity": {"nested": "object"},
            "host_networking_topology": True,
            "host_network_drivers": "eth0\nvirtio_net",
            "cooling": "not read",
            "other_software_stack": {"nccl": "2.21.5", "plugin": {"deep": 1}},
        }
    )
    assert kept["host_processor_model_name"] == "x" * MAX_TEXT
    assert "host_memory_capacity" not in kept and "host_networking_topology" not in kept and "cooling" not in kept
    assert kept["host_network_drivers"] == "eth0 virtio_net"  # one line
    assert kept["other_software_stack"] == {"nccl": "2.21.5"}
    assert system_fields([1, 2]) == {} and system_fields("text") == {}


def test_firmware_is_read_from_a_recorded_ibv_devinfo_and_from_sysfs(tmp_path: Path) -> None:
    recorded = (REPO / "tests/data/probe/connectx-infiniband/ibv_devinfo.txt").read_text()
    assert firmware_from_ibv_devinfo(recorded) == {"mlx5_0": "20.35.1012"}
    device = tmp_path / "sys/class/infiniband/mlx5_0"
    device.mkdir(parents=True)
    (device / "fw_ver").write_text("20.35.1012\n")
    assert firmware_from_sysfs(tmp_path) == {"mlx5_0": "20.35.1012"}
    assert firmware_from_sysfs(tmp_path / "elsewhere") == {}


def test_describe_adds_the_drivers_the_site_file_and_the_score(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       25165824 kB\n")
    facts = HostFacts(cpu_model="Intel Xeon", cpu_count=2, nics=[Nic("eth0", "up", 1500, None, "virtio_net")])
    system = describe(
        facts,
        [read(RECORDED)],
        {"versions": {"openmpi": "4.1.4"}},
        system_name="site-a",
        site=site_file(tmp_path),
        root=tmp_path,
    )
    assert system["host_network_drivers"] == "eth0 virtio_net"
    assert system["host_memory_capacity"] == "24 GiB"
    assert system["site_file"]["fabrics"]["ethernet"] == {"interface": "fbemu0", "devices": [], "link_gbit_s": 0.3}
    completeness = system["completeness"]
    assert completeness["missing"] == ["nic_firmware", "topology", "placement"]
    assert completeness["score"] == pytest.approx(0.75)
    assert completeness["fields"] == {need.name: need.weight for need in NEEDS}
