"""RoCE v2 (issue 38): the GID table read from recorded real output (tests/data/roce/SOURCE.md),
the preflight's refusal of a wrong GID index or link layer, the probe's verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.fabrics import PROFILES
from launch.site import gids, probe
from launch.site.preflight.ports import port_checks
from launch.site.probe import RdmaPort, verdicts
from tests.conftest import fabric_bench

DATA = Path(__file__).parents[1] / "data" / "roce"
ROWS = {"show_gids-ibm-ssnr4.txt": 6, "show_gids-nccl1573.txt": 8, "show_gids-multus1100.txt": 2}


@pytest.mark.parametrize("capture", sorted(ROWS))
def test_show_gids_rows_are_read_with_their_version_and_address(capture):
    text = (DATA / capture).read_text()
    table = gids.parse_show_gids(text)
    assert len(table) == ROWS[capture]
    rows = [line.split() for line in text.splitlines() if line.startswith("mlx5")]
    for gid, row in zip(table, rows):
        assert (gid.device, str(gid.port), str(gid.index), gid.gid) == tuple(row[:4])
        assert gid.type == (gids.V2 if row[-2] == "v2" else gids.V1) and gid.netdev == row[-1]
        # the IPv4 column show_gids prints, where it prints one, is the mapped address we derive
        assert gid.ipv4 == (row[4] if len(row) == 7 else None)


def materialise(text: str, root: Path, link_layer: str = "Ethernet") -> None:
    """A sysfs tree holding the values show_gids printed (it reads them from these files)."""
    for gid in gids.parse_show_gids(text):
        port = root / "sys/class/infiniband" / gid.device / "ports" / str(gid.port)
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port / sub).mkdir(parents=True, exist_ok=True)
        (port / "link_layer").write_text(link_layer + "\n")
        (port / "gids" / str(gid.index)).write_text(gid.gid + "\n")
        (port / "gid_attrs/types" / str(gid.index)).write_text(f"{gid.type}\n")
        (port / "gid_attrs/ndevs" / str(gid.index)).write_text(f"{gid.netdev}\n")


def test_the_sysfs_table_reads_back_as_show_gids_printed_it(tmp_path):
    text = (DATA / "show_gids-ibm-ssnr4.txt").read_text()
    materialise(text, tmp_path)
    assert gids.read_sysfs(tmp_path, "mlx5_0", 1) == gids.parse_show_gids(text)


def roce_env(index: str, devices: str = "mlx5_0:1") -> dict[str, str]:
    return {"UCX_NET_DEVICES": devices, "NCCL_IB_GID_INDEX": index, "UCX_IB_GID_INDEX": index}


@pytest.mark.parametrize(
    "index, verdict, words",
    [
        ("5", "ok", "GID index 5 on mlx5_0 port 1: 5 (RoCE v2, 172.19.0.60 on ens1f0)"),
        (
            "4",
            "fail",
            "GID index 4 on mlx5_0 port 1 is RoCE v1 (4 (IB/RoCE v1, 172.19.0.60 on ens1f0)), not v2; "
            "RoCE v2 entries: 1 (RoCE v2, link-local on ens1f0), 3 (RoCE v2, link-local on ens1f0), "
            "5 (RoCE v2, 172.19.0.60 on ens1f0)",
        ),
        (
            "1",
            "warn",
            "is RoCE v2 but link-local (fe80:0000:0000:0000:0e42:a1ff:fe5d:4db8): peers on other subnets "
            "cannot be reached; routable: 5 (RoCE v2, 172.19.0.60 on ens1f0)",
        ),
        ("9", "fail", "GID index 9 on mlx5_0 port 1 is empty; RoCE v2 entries: 1 "),
    ],
)
def test_a_wrong_gid_index_is_named_in_one_line(tmp_path, index, verdict, words):
    materialise((DATA / "show_gids-ibm-ssnr4.txt").read_text(), tmp_path)
    checks = port_checks(PROFILES["roce"], roce_env(index), tmp_path)
    assert [(c.check, c.verdict) for c in checks] == [("rdma port mlx5_0 port 1", "ok"), ("gid mlx5_0 port 1", verdict)]
    assert words in checks[1].detail and "\n" not in checks[1].line()


def test_every_rail_is_checked_and_a_missing_device_fails(tmp_path):
    materialise((DATA / "show_gids-nccl1573.txt").read_text(), tmp_path)
    checks = port_checks(PROFILES["roce"], roce_env("7", "mlx5_0:1,mlx5_1:1,mlx5_9:1"), tmp_path)
    assert [(c.check, c.verdict) for c in checks] == [
        ("rdma port mlx5_0 port 1", "ok"),
        ("gid mlx5_0 port 1", "ok"),
        ("rdma port mlx5_1 port 1", "ok"),
        ("gid mlx5_1 port 1", "ok"),
        ("rdma port mlx5_9 port 1", "fail"),
    ]
    assert "10.152.4.12 on net2" in checks[3].detail


def test_a_preset_on_the_other_link_layer_names_the_right_fabric(tmp_path):
    text = (DATA / "show_gids-multus1100.txt").read_text()
    materialise(text, tmp_path)
    checks = port_checks(PROFILES["infiniband"], {"UCX_NET_DEVICES": "mlx5_4:1"}, tmp_path)
    assert [(c.verdict, c.detail, c.fix) for c in checks] == [
        ("fail", "mlx5_4 port 1 is on Ethernet, not InfiniBand", "use --fabric roce")
    ]
    materialise(text, tmp_path / "ib", link_layer="InfiniBand")
    checks = port_checks(PROFILES["roce"], roce_env("5", "mlx5_4:1"), tmp_path / "ib")
    assert checks[0].fix == "use --fabric infiniband" and len(checks) == 1
    assert port_checks(PROFILES["ethernet"], {}, tmp_path) == []  # no RDMA port involved


def test_probe_tells_roce_from_infiniband_on_recorded_ports():
    """ibv_devinfo of an active ConnectX-7 on Ethernet; of a host with an InfiniBand port up and
    a RoCE port down."""
    cx7 = probe.HostFacts(rdma_ports=probe.parse_ibv_devinfo((DATA / "ibv_devinfo-roce-deepep38.txt").read_text()))
    assert verdicts(cx7)["roce"].usable and "mlx5_2 port 1 ACTIVE (Ethernet" in verdicts(cx7)["roce"].reason
    assert not verdicts(cx7)["infiniband"].usable and "RoCE (Ethernet) only" in verdicts(cx7)["infiniband"].reason
    mixed = probe.HostFacts(rdma_ports=probe.parse_ibv_devinfo((DATA / "ibv_devinfo-roce-ucx2534.txt").read_text()))
    assert [(p.device, p.state, p.link_layer) for p in mixed.rdma_ports] == [
        ("mlx5_1", "ACTIVE", "InfiniBand"),
        ("mlx5_3", "DOWN", "Ethernet"),
    ]
    assert verdicts(mixed)["infiniband"].usable and not verdicts(mixed)["roce"].usable
    ib = probe.HostFacts(rdma_ports=probe.parse_ibv_devinfo((DATA / "ibv_devinfo-ib-hustcat8.txt").read_text()))
    assert verdicts(ib)["infiniband"].usable and not verdicts(ib)["roce"].usable


def test_probe_names_the_roce_v2_entries_and_refuses_a_v1_only_table():
    table = gids.parse_show_gids((DATA / "show_gids-multus1100.txt").read_text())
    port = [RdmaPort("mlx5_4", 1, "ACTIVE", "Ethernet", 200.0, "sysfs")]
    verdict = verdicts(probe.HostFacts(rdma_ports=port, roce_gids=table))["roce"]
    assert verdict.usable and verdict.reason.endswith("RoCE v2 GIDs: mlx5_4:1 5 (RoCE v2, 172.20.1.1 on net1)")
    v1_only = [g for g in table if g.type == gids.V1]
    verdict = verdicts(probe.HostFacts(rdma_ports=port, roce_gids=v1_only))["roce"]
    assert not verdict.usable and "RoCE v1 GIDs only" in verdict.reason


def test_the_probe_reads_the_gid_table_from_sysfs(tmp_path):
    materialise((DATA / "show_gids-ibm-ssnr4.txt").read_text(), tmp_path)
    (tmp_path / "sys/class/infiniband/mlx5_0/ports/1/state").write_text("4: ACTIVE\n")
    facts = probe.collect(run=lambda name, argv: probe.ToolOutput("absent"), root=tmp_path)
    assert [g.index for g in facts.roce_gids] == [0, 1, 2, 3, 4, 5]
    assert "5 (RoCE v2, 172.19.0.60 on ens1f0)" in verdicts(facts)["roce"].reason


def test_run_shows_roces_variables_and_refuses_a_site_without_its_gid_index(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[fabrics.roce]\ninterface = "eth2"\nhca = "mlx5_0,mlx5_1"\ngid_index = 3\ntraffic_class = 106\n')
    results = tmp_path / "results"
    dry = fabric_bench("run", "--dry-run", "--site", str(site), "--fabric", "roce", "--results", str(results))
    assert dry.returncode == 0, dry.stderr
    for shown in (
        "UCX_IB_GID_INDEX=3",
        "UCX_IB_TRAFFIC_CLASS=106",
        "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1",
        "OMPI_MCA_pml=ucx",
    ):
        assert shown in dry.stdout, shown
    site.write_text('[fabrics.roce]\ninterface = "eth2"\nhca = "mlx5_0"\ngid_index = 300\n')
    bad = fabric_bench("run", "--dry-run", "--site", str(site), "--fabric", "roce", "--results", str(results))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "[fabrics.roce].gid_index: expected a GID table index, 0-255, got 300" in bad.stderr
    site.write_text('[fabrics.roce]\ninterface = "eth2"\nhca = "mlx5_0"\n')
    missing = fabric_bench("run", "--dry-run", "--site", str(site), "--fabric", "roce", "--results", str(results))
    assert missing.returncode == 2 and "needs the site setting 'gid_index'" in missing.stderr
    assert not results.exists()
