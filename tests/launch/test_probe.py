"""Probe parsers and verdicts on outputs recorded from real hosts, and a real probe of this host."""

import json
import shutil
import subprocess
from pathlib import Path

from containers.fabrics import HOST_FABRICS
from launch.site import probe
from launch.site.probe import (
    Gpu,
    RdmaPort,
    ToolOutput,
    UcxTransport,
    collect,
    parse_cpu_list,
    parse_fi_info,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_nvidia_smi,
    parse_nvidia_smi_topo,
    parse_ucx_info,
    probe_report,
    run_tool,
    verdicts,
)
from tests.conftest import fabric_bench, need

RECORDED = Path(__file__).resolve().parents[1] / "data" / "probe"


def recorded(source: str) -> probe.HostFacts:
    """Collect facts from a recorded host: tools answer from SOURCE/<command>.txt, else absent."""
    folder = RECORDED / source

    def run(name, argv):
        path = folder / f"{name}.txt"
        return ToolOutput("ok", path.read_text()) if path.exists() else ToolOutput("absent")

    return collect(run=run, root=folder)


def test_every_recorded_source_names_where_it_came_from():
    sources = [p for p in RECORDED.iterdir() if p.is_dir()]
    assert len(sources) >= 8
    for source in sources:
        text = (source / "SOURCE.md").read_text()
        assert "http" in text or source.name == "this-host", source
        names = {p.stem for p in source.glob("*.txt")}
        assert names <= set(probe.COMMANDS), f"{source.name}: {names - set(probe.COMMANDS)}"


def test_connectx_infiniband_host_is_usable_at_100_gbps():
    facts = recorded("connectx-infiniband")
    assert facts.rdma_ports == [RdmaPort("mlx5_0", 1, "ACTIVE", "InfiniBand", 100.0, "ibstat")]
    verdict = verdicts(facts)["infiniband"]
    assert verdict.usable and "mlx5_0 port 1 ACTIVE (InfiniBand, 100 Gb/s)" in verdict.reason
    assert not verdicts(facts)["omnipath"].usable


def test_ibv_devinfo_alone_gives_state_and_link_layer_but_no_rate():
    ports = parse_ibv_devinfo((RECORDED / "connectx-infiniband/ibv_devinfo.txt").read_text())
    assert ports == [RdmaPort("mlx5_0", 1, "ACTIVE", "InfiniBand", None, "ibv_devinfo")]


def test_roce_ports_are_not_infiniband():
    facts = recorded("connectx-roce")
    assert [(p.device, p.state, p.link_layer, p.rate_gbps) for p in facts.rdma_ports] == [
        ("mlx5_0", "ACTIVE", "Ethernet", 100.0),
        ("mlx5_1", "ACTIVE", "Ethernet", 100.0),
    ]
    verdict = verdicts(facts)["infiniband"]
    assert not verdict.usable and "RoCE (Ethernet) only" in verdict.reason and "mlx5_1" in verdict.reason
    assert verdicts(facts)["roce"].usable  # a fabric of its own (issue 38)


def test_omnipath_hfi_counts_as_omnipath_not_infiniband():
    facts = recorded("omnipath-hfi1")
    assert facts.rdma_ports[0].device == "hfi1_0" and facts.rdma_ports[0].link_layer == "InfiniBand"
    assert verdicts(facts)["omnipath"].usable
    assert "hfi1_0 port 1 ACTIVE" in verdicts(facts)["omnipath"].reason
    assert not verdicts(facts)["infiniband"].usable


def test_efa_host_has_an_rdm_endpoint():
    text = (RECORDED / "efa/fi_info_efa.txt").read_text()
    assert [(e.provider, e.domain, e.type) for e in parse_fi_info(text)] == [
        ("efa", "efa_0-rdm", "FI_EP_RDM"),
        ("efa", "efa_0-dgrm", "FI_EP_DGRAM"),
        ("efa;ofi_rxd", "efa_0-dgrm", "FI_EP_RDM"),
    ]
    verdict = verdicts(recorded("efa"))["efa"]
    assert verdict.usable and verdict.reason.endswith("RDM domain(s): efa_0-rdm")
    assert not verdicts(recorded("efa"))["slingshot"].usable


def test_slingshot_host_has_a_cxi_domain():
    facts = recorded("slingshot-cxi")
    assert [(e.provider, e.fabric, e.domain, e.protocol) for e in facts.provider_endpoints["cxi"]] == [
        ("cxi", "cxi", "cxi0", "FI_PROTO_CXI")
    ]
    assert verdicts(facts)["slingshot"].usable and "cxi0" in verdicts(facts)["slingshot"].reason
    assert verdicts(facts)["efa"].reason == "fi_info not installed"


def test_ucx_transports_on_a_connectx_host():
    text = (RECORDED / "ucx-connectx/ucx_info.txt").read_text()
    assert parse_ucx_info(text) == [UcxTransport("rc_verbs", "mlx5_0:1")]


def test_nvidia_smi_row_parsed_with_the_fields_it_was_queried_with():
    fields = (
        "power.limit,power.min_limit,power.max_limit,memory.total,vbios_version,"
        "driver_version,name,gpu_uuid,power.draw,temperature.gpu,temperature.memory,"
        "clocks.current.graphics,clocks.sm,clocks.mem,utilization.gpu,utilization.memory,"
        "fan.speed,pcie.link.width.current,pstate"
    ).split(",")
    text = (RECORDED / "nvidia-smi-rtx2080/nvidia_smi.txt").read_text()
    assert parse_nvidia_smi(text, fields) == [Gpu(0, "GeForce RTX 2080", 7979, "440.64")]
    assert parse_nvidia_smi("0, NVIDIA H200, 143771, 570.86.15\n") == [Gpu(0, "NVIDIA H200", 143771, "570.86.15")]


def topology(source: str) -> probe.GpuTopology:
    return parse_nvidia_smi_topo((RECORDED / source / "nvidia_smi_topo.txt").read_text())


def test_topo_of_an_8_gpu_host_gives_each_gpu_its_own_nic_and_numa_node():
    topo = topology("topo-8gpu-nv8-9nic")
    assert [g.index for g in topo.gpus] == list(range(7))  # rows GPU0-GPU6 recorded
    assert list(topo.nics) == [f"NIC{n}" for n in range(9)] and set(topo.nics.values()) == {None}
    assert [(g.cpu_affinity, g.numa_affinity) for g in topo.gpus[3:5]] == [("0-47,96-143", 0), ("48-95,144-191", 1)]
    assert [topo.nearest_nics(g.index) for g in topo.gpus] == [
        ["NIC2"],
        ["NIC4"],
        ["NIC6"],
        ["NIC8"],
        ["NIC1"],
        ["NIC3"],
        ["NIC5"],
    ]
    assert topo.nic_links(0) == {
        "NIC0": "NODE",
        "NIC1": "SYS",
        "NIC2": "PIX",
        "NIC3": "SYS",
        "NIC4": "NODE",
        "NIC5": "SYS",
        "NIC6": "NODE",
        "NIC7": "SYS",
        "NIC8": "NODE",
    }
    assert {k: v for k, v in topo.gpus[0].links.items() if k.startswith("GPU")} == {
        f"GPU{n}": "NV8" for n in range(1, 8)
    }


def test_topo_with_nics_only_at_node_or_sys_distance():
    topo = topology("topo-6gpu-nv4-2nic")
    assert [(g.index, g.cpu_affinity, g.numa_affinity) for g in topo.gpus] == [
        (0, "0-11,24-35", 0),
        (1, "0-11,24-35", 0),
        (2, "0-11,24-35", 0),
        (3, "0-11,24-35", 0),
        (4, "12-23,36-47", 1),
        (5, "12-23,36-47", 1),
    ]
    assert topo.nic_links(0) == {"NIC0": "NODE", "NIC1": "NODE"} and topo.nic_links(5) == {"NIC0": "SYS", "NIC1": "SYS"}
    assert topo.gpus[0].links["GPU1"] == "NV4" and topo.gpus[0].links["GPU2"] == "PXB"
    assert "NIC0" not in [f"GPU{g.index}" for g in topo.gpus]  # NIC rows are not GPUs


def test_topo_tab_separated_with_gpu_numa_id_column():
    topo = topology("topo-2gpu-phb-tabs")
    assert [(g.index, g.cpu_affinity, g.numa_affinity, g.links) for g in topo.gpus] == [
        (0, "0-63", 0, {"GPU1": "PHB"}),
        (1, "0-63", 0, {"GPU0": "PHB"}),
    ]
    assert topo.nics == {} and topo.nearest_nics(0) == []


def test_topo_header_without_indent_and_two_space_gaps():
    topo = topology("topo-8gpu-nv12-18nic")
    assert len(topo.nics) == 18 and [g.numa_affinity for g in topo.gpus] == [3, 3, 1, 1]
    assert topo.nearest_nics(0) == ["NIC5", "NIC6", "NIC7", "NIC8"]
    assert topo.nearest_nics(2) == ["NIC1", "NIC2", "NIC3", "NIC4"]
    assert topo.nic_links(3)["NIC13"] == "SYS"


def test_topo_of_an_older_driver_names_nic_columns_by_device():
    topo = topology("topo-16gpu-mlx5-columns")
    assert topo.nics == {f"mlx5_{n}": f"mlx5_{n}" for n in range(10)}
    assert [(g.numa_affinity, g.cpu_affinity) for g in topo.gpus] == [(None, "0-23,48-71")] * 4
    assert [topo.nearest_nics(g.index) for g in topo.gpus] == [["mlx5_0"], ["mlx5_0"], ["mlx5_1"], ["mlx5_1"]]
    assert len([k for k in topo.gpus[0].links if k.startswith("GPU")]) == 15


def test_topo_nic_legend_names_the_nic_columns_and_no_matrix_is_none():
    # constructed in the format of a recent driver's legend (the recorded tables above carry none)
    text = (
        "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tPIX\t0-7\t0\t\tN/A\n"
        "NIC0\tPIX\t X \n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    topo = parse_nvidia_smi_topo(text)
    assert topo.nics == {"NIC0": "mlx5_0"} and topo.nic_links(0) == {"NIC0": "PIX"}
    assert parse_nvidia_smi_topo("") is None
    assert parse_nvidia_smi_topo("NVIDIA-SMI has failed because it couldn't communicate with the driver.") is None
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11] and len(parse_cpu_list("0-47,96-143")) == 96


def test_recorded_topology_is_part_of_the_host_facts():
    facts = recorded("topo-8gpu-nv8-9nic")
    assert facts.tools["nvidia_smi_topo"] == "ok" and len(facts.gpu_topology.gpus) == 7
    assert recorded("connectx-infiniband").gpu_topology is None
    json.dumps(probe_report(facts))


def test_recorded_this_host():
    facts = recorded("this-host")
    assert (facts.cpu_count, facts.cpu_model) == (2, "AMD EPYC")
    eth0 = next(n for n in facts.nics if n.name == "eth0")
    assert (eth0.operstate, eth0.mtu, eth0.speed_mbps, eth0.driver) == ("up", 1400, None, "virtio_net")
    assert {n.name for n in facts.nics} == {"eth0", "ifb0", "ifb1", "lo"}
    assert {"tcp", "shm", "psm2", "ofi_rxm"} <= set(facts.libfabric_providers)
    assert UcxTransport("tcp", "eth0") in facts.ucx_transports
    assert facts.mpi.version == "4.1.4" and "ucx" in facts.mpi.components["pml"]
    assert "ofi" in facts.mpi.components["mtl"] and "tcp" in facts.mpi.components["btl"]
    assert facts.slurm_version == "22.05.8" and {"pmix", "pmi2"} <= set(facts.slurm_mpi_plugins)
    result = verdicts(facts)
    assert result["ethernet"].usable and "eth0 (virtio_net" in result["ethernet"].reason
    assert not result["infiniband"].usable
    # libpsm2 and fi_info's psm2 provider are installed, but there is no HFI
    assert not result["omnipath"].usable and "psm2" in result["omnipath"].reason
    json.dumps(probe_report(facts))  # JSON-serialisable as it stands


def test_sysfs_rdma_ports_are_read_with_rate(tmp_path):
    port = tmp_path / "sys/class/infiniband/mlx5_1/ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    assert probe.read_sysfs_rdma(tmp_path) == [RdmaPort("mlx5_1", 1, "ACTIVE", "InfiniBand", 200.0, "sysfs")]


def test_ibstat_down_port_is_not_usable():
    text = "CA 'mlx4_0'\n\tPort 1:\n\t\tState: Down\n\t\tRate: 10\n\t\tLink layer: InfiniBand\n"
    facts = probe.HostFacts(rdma_ports=parse_ibstat(text))
    verdict = verdicts(facts)["infiniband"]
    assert not verdict.usable and "mlx4_0 port 1 DOWN" in verdict.reason


def test_run_tool_never_raises():
    assert run_tool("x", ["no-such-tool-fabric-bench"]).status == "absent"
    assert run_tool("x", ["sh", "-c", "echo why >&2; exit 3"]).status == "exit 3: why"
    assert run_tool("x", ["sleep", "5"], timeout_s=0.2).status == "timeout after 0.2s"
    assert run_tool("x", ["echo", "hi"]) == ToolOutput("ok", "hi\n")


def test_real_probe_of_this_host_matches_sysfs_and_fi_info():
    proc = fabric_bench("probe", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    facts, result = report["facts"], report["verdicts"]
    sys_net = Path("/sys/class/net")
    assert {n["name"] for n in facts["nics"]} == {p.name for p in sys_net.iterdir()}
    for nic in facts["nics"]:
        assert nic["operstate"] == (sys_net / nic["name"] / "operstate").read_text().strip()
        assert nic["mtu"] == int((sys_net / nic["name"] / "mtu").read_text())
    need(shutil.which("fi_info") is not None, "fi_info (libfabric-bin) not installed")
    listed = subprocess.run(["fi_info", "-l"], capture_output=True, text=True).stdout
    assert facts["libfabric_providers"] == probe.parse_fi_info_list(listed)
    assert "tcp" in facts["libfabric_providers"]
    assert result["ethernet"]["usable"]
    if not Path("/sys/class/infiniband").exists():
        assert not result["infiniband"]["usable"]
        assert "no /sys/class/infiniband device" in result["infiniband"]["reason"]


def test_probe_table_shows_every_fabric():
    proc = fabric_bench("probe", timeout=120)
    assert proc.returncode == 0, proc.stderr
    for fabric in HOST_FABRICS:
        assert fabric in proc.stdout
    assert "Host facts" in proc.stdout


def test_the_probe_says_slurm_is_unconfigured_and_no_gpu_in_words():
    """A Slurm client without a cluster is not an error line, and a GPU-less host says so."""
    import io

    from rich.console import Console

    from launch.cli.probe import facts_table, topology_table

    facts = recorded("this-host")
    facts.slurm_version = None
    facts.tools["sinfo_version"] = "exit 1: sinfo: fatal: Could not establish a configuration source"
    facts.tools["nvidia_smi_topo"] = "absent"
    facts.gpu_topology = None
    out = io.StringIO()
    Console(file=out, width=200).print(facts_table(facts), topology_table(facts))
    shown = out.getvalue()
    assert "client installed, no cluster configured (no slurm.conf; SLURM_CONF names one)" in shown
    assert "fatal" not in shown and "GPUs: none (no nvidia-smi)" in shown
