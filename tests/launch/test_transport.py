"""Transport evidence: parsing what the libraries report, judging it against the
fabric asked for, and real runs here over ob1/tcp, UCX/tcp and a wrong selection."""

import json
from pathlib import Path

import pytest

from launch.ranks.reporting import reporting_env
from launch.results import transport
from launch.runs.run import horovod_built_for
from launch.ranks.runspec import RunSpec
from tests.conftest import fabric_bench, need

# Captured on this host (Open MPI 4.1.4, UCX 1.13.1, libfabric 1.17), two ranks.
OB1_TCP = """\
[vm:27872] select: initializing pml component ob1
[vm:27872] selected ob1 best priority 20
[vm:27872] select: component ob1 selected
[vm:27935] mca: bml: Using self btl for send to [[485,1],0] on node vm
[vm:27935] mca: bml: Using tcp btl for send to [[485,1],1] on node vm
"""
UCX_TCP = """\
[vm:27899] selected ucx best priority 51
[1796038241.388788] [vm:27955:0]     ucp_context.c:1849 UCX  INFO  Version 1.13.1 (loaded from /lib/x86_64-linux-gnu/libucp.so.0)
[1796038241.534521] [vm:27955:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[0]: tag(self/memory0 tcp/lo tcp/eth0)
[1796038241.536505] [vm:27955:0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(tcp/lo tcp/eth0)
"""
UCX_SM = "[1.0] [vm:1141 :0]      ucp_worker.c:1763 UCX  INFO    ep_cfg[1]: tag(sysv/memory cma/memory)\n"
CM_OFI = """\
[vm:28208] select: initializing pml component cm
[vm:28208] mca:base:select:(  mtl) Selected component [ofi]
[vm:28208] select: component ofi selected
[vm:28011] ../../../../../../ompi/mca/mtl/ofi/mtl_ofi_component.c:337: mtl:ofi:prov: tcp;ofi_rxm
[vm:28208] selected cm best priority 25
"""
# NCCL's INFO format (host:pid:tid [dev] NCCL INFO ...)
NCCL_IB_GDR = """\
gpu1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.1<0>
gpu1:100:200 [0] NCCL INFO Using network IB
gpu1:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0/GDRDMA
"""
NCCL_SOCKET = """\
gpu1:100:200 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
gpu1:100:200 [0] NCCL INFO Using network Socket
gpu1:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/Socket/0
"""


def test_open_mpi_ob1_tcp_is_observed():
    seen = transport.observe(OB1_TCP)
    assert seen["mpi"] == {"pml": ["ob1"], "btl": ["tcp"]}
    assert any("Using tcp btl" in line for line in seen["lines"])


def test_ucx_lanes_name_transports_and_devices():
    seen = transport.observe(UCX_TCP)
    assert seen["mpi"]["pml"] == ["ucx"]
    assert seen["ucx"]["transports"] == ["tcp"] and "tcp/eth0" in seen["ucx"]["lanes"]
    assert seen["ucx"]["version"] == "1.13.1"
    assert transport.observe(UCX_SM)["ucx"]["transports"] == ["cma", "sysv"]


def test_cm_ofi_names_the_mtl_and_provider_not_ofi_as_pml():
    seen = transport.observe(CM_OFI)["mpi"]
    assert seen == {"pml": ["cm"], "mtl": ["ofi"], "ofi_provider": ["tcp;ofi_rxm"]}


def test_nccl_network_and_gpudirect():
    ib = transport.observe(NCCL_IB_GDR)["nccl"]
    assert ib["network"] == ["IB"] and ib["gdr"] is True and ib["devices"][0].startswith("IB: [0]mlx5_0")
    sock = transport.observe(NCCL_SOCKET)["nccl"]
    assert sock["network"] == ["Socket"] and sock["gdr"] is False


RECORDED_NCCL = Path(__file__).resolve().parents[1] / "data" / "nccl"


def recorded_nccl(name: str) -> dict:
    return transport.observe((RECORDED_NCCL / name / "nccl_info.log").read_text())


def test_every_recorded_nccl_log_names_where_it_came_from():
    logs = sorted(p for p in RECORDED_NCCL.iterdir() if p.is_dir())
    assert len(logs) >= 10
    for folder in logs:
        source = (folder / "SOURCE.md").read_text()
        assert "https://github.com/" in source and "Hardware:" in source and "Trimmed:" in source, folder
        assert "NCCL INFO" in (folder / "nccl_info.log").read_text(), folder
        assert "nccl" in transport.observe((folder / "nccl_info.log").read_text()), folder


# What each recorded log says, as its SOURCE.md describes it:
# network, GPUDirect RDMA, PXN, libfabric provider, NCCL version.
RECORDED_NCCL_FACTS = {
    "ib-gdrdma-a100": (["IB"], True, False, [], "2.7.6+cuda11.1"),
    "roce-h100": (["IB"], None, None, [], "2.19.3+cuda12.3"),
    "ring-format-roce": (["IB"], False, False, [], "2.5.7+cuda10.0"),
    "ibext-roce-sharp-plugin": (["IBext_v8"], False, False, [], None),
    "socket-lo-two-gpus": (["Socket"], None, None, [], "2.10.3+cuda11.3"),
    "socket-one-rank": (["Socket"], None, None, [], "2.19.3+cuda12.3"),
    "socket-channels-ibext-fallback": (["Socket"], False, False, [], None),
    "ofi-efa-libfabric": (["Libfabric"], None, None, ["efa"], None),
    "ofi-efa-aws-libfabric": (["AWS Libfabric"], None, None, ["efa"], None),
    "ofi-efa-gdrdma": (["AWS Libfabric"], True, False, [], "2.23.4+cuda12.4"),
    "ofi-efa-pxn-shared": (["AWS Libfabric"], True, True, [], None),
    "ofi-tcp-rxm": ([], None, None, ["tcp;ofi_rxm"], "2.4.6+cuda10.0"),
    "nvls-one-node": ([], None, None, [], None),
    "nvls-tree-two-nodes": ([], None, None, [], None),
    "collnet-sharp-group-failed": ([], None, None, [], None),
    "collnet-unsupported-ignored": (["IB"], True, False, [], None),
}


@pytest.mark.parametrize("name", sorted(RECORDED_NCCL_FACTS))
def test_recorded_nccl_logs_are_read_as_published(name):
    seen = recorded_nccl(name)["nccl"]
    network, gdr, pxn, provider, version = RECORDED_NCCL_FACTS[name]
    assert (seen["network"], seen["gdr"], seen["pxn"], seen["ofi_provider"], seen["version"]) == (
        network,
        gdr,
        pxn,
        provider,
        version,
    )


def test_recorded_channels_keep_plugin_names_pxn_and_flags():
    assert recorded_nccl("ofi-efa-pxn-shared")["nccl"]["channels"] == [
        "NET/AWS Libfabric/0(0)/GDRDMA/Shared",
        "NET/AWS Libfabric/1(2)/GDRDMA/Shared",
        "NET/AWS Libfabric/1/GDRDMA/Shared",
    ]
    assert recorded_nccl("ib-gdrdma-a100")["nccl"]["channels"] == [
        "NET/IB/0/GDRDMA",
        "NET/IB/2/GDRDMA",
        "NET/IB/4/GDRDMA",
        "NET/IB/5/GDRDMA",
    ]
    # NCCL <= 2.5 "Ring NN : ... via ..." lines, intra-node transports included
    assert recorded_nccl("ring-format-roce")["nccl"]["channels"] == ["NET/IB/0", "P2P/IPC", "direct shared memory"]
    assert recorded_nccl("socket-channels-ibext-fallback")["nccl"]["channels"] == ["NET/Socket/3", "P2P/IPC/read"]
    # a 1-rank communicator's "Channel 00/32 :    0" ring lines connect nothing
    assert recorded_nccl("socket-one-rank")["nccl"]["channels"] == []


def test_recorded_devices_and_evidence_lines():
    devices = recorded_nccl("ib-gdrdma-a100")["nccl"]["devices"]
    assert len(devices) == 1 and devices[0].startswith("IB: [0]mlx5_8:1/IB [1]mlx5_9:1/IB")
    assert recorded_nccl("ibext-roce-sharp-plugin")["nccl"]["devices"] == [
        "IB: [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE} [RO]; "
        "OOB bond0.526:169.136.106.9<0>"
    ]
    assert recorded_nccl("socket-lo-two-gpus")["nccl"]["devices"] == ["Socket: [0]lo:127.0.0.1<0>"]
    lines = recorded_nccl("ofi-efa-aws-libfabric")["lines"]
    assert "algo-1:18564:18638 [2] NCCL INFO Using network AWS Libfabric" in lines
    assert not any(line.startswith(("libfabric:", "2024-")) for line in lines)


def test_nccl_network_kinds():
    kinds = {
        name: transport.nccl_network_kind(name)
        for name in ("IB", "IBext", "IBext_v8", "Socket", "AWS Libfabric", "Libfabric", "OFI", "CollNet")
    }
    assert kinds == {
        "IB": "IB",
        "IBext": "IB",
        "IBext_v8": "IB",
        "Socket": "Socket",
        "AWS Libfabric": "OFI",
        "Libfabric": "OFI",
        "OFI": "OFI",
        "CollNet": "CollNet",
    }


def test_recorded_runs_judged_against_their_fabric():
    def verdict(fabric, name, env=None):
        return transport.judge(fabric, env or {}, recorded_nccl(name), "nccl", nccl=True)

    assert verdict("infiniband", "ib-gdrdma-a100", {"NCCL_NET_GDR_LEVEL": "PHB"})["verdict"] == "match"
    assert verdict("efa", "ofi-efa-aws-libfabric")["verdict"] == "match"
    assert verdict("efa", "ofi-efa-libfabric")["verdict"] == "match"
    assert verdict("efa", "ofi-efa-pxn-shared")["verdict"] == "match"
    # asked for EFA, got TCP sockets
    assert verdict("efa", "socket-one-rank")["mismatches"] == ["nccl.network: asked OFI, ran over Socket"]
    # GPUDirect asked for, NET/IB/0 without GDRDMA (the complaint)
    assert verdict("infiniband", "ring-format-roce", {"NCCL_NET_GDR_LEVEL": "PHB"})["mismatches"] == [
        "nccl.gdr: asked on, ran over off"
    ]
    # NCCL_IB_DISABLE=1 without a fabric: sockets asked, the IBext plugin's RDMA used
    ibext = transport.judge(None, {"NCCL_IB_DISABLE": "1"}, recorded_nccl("ibext-roce-sharp-plugin"), "nccl")
    assert ibext["mismatches"] == ["nccl.network: asked Socket, ran over IBext_v8"]
    assert (
        transport.judge(None, {"NCCL_IB_DISABLE": "1"}, recorded_nccl("socket-lo-two-gpus"), "nccl")["verdict"]
        == "match"
    )


def test_ethernet_over_ob1_tcp_matches():
    verdict = transport.judge("ethernet", {}, transport.observe(OB1_TCP), "mpi")
    assert verdict["verdict"] == "match" and {c["layer"] for c in verdict["checks"]} == {"mpi.pml", "mpi.btl"}


def test_infiniband_that_ran_over_tcp_is_a_mismatch():
    verdict = transport.judge("infiniband", {}, transport.observe(OB1_TCP), "mpi")
    assert verdict["verdict"] == "mismatch"
    assert verdict["mismatches"] == ["mpi.pml: asked ucx, ran over ob1", "mpi.btl: asked ^openib,tcp, ran over tcp"]
    ucx = transport.judge("infiniband", {}, transport.observe(UCX_TCP), "mpi")
    assert "ucx.transports: asked rc,ud,sm,self, ran over tcp" in ucx["mismatches"]


def test_ucx_forced_on_an_ethernet_cpu_run_is_a_mismatch_and_the_gpu_mpi_path_is_not():
    """Ethernet hands GPU buffers to MPI over UCX (its mpi_gpu_env): only a GPU run's MPI path asks
    for it; the same variable forced on a CPU run is the user's own, not what the fabric asks."""
    forced = {"OMPI_MCA_pml": "ucx", "UCX_TLS": "tcp,self"}
    cpu = transport.judge("ethernet", forced, transport.observe(UCX_TCP), "mpi")
    assert cpu["mismatches"] == ["mpi.pml: asked ob1, ran over ucx"]
    gpu = transport.judge("ethernet", forced, transport.observe(UCX_TCP), "mpi", gpus_per_node=1)
    assert gpu["verdict"] == "match"


def test_gpudirect_on_one_side_only_is_partial_not_on():
    """NCCL_IB_GDR's channel plus the reverse channel without /GDRDMA: GPUDirect asked on
    must not read as on because one NET channel has it."""
    half = NCCL_IB_GDR + "gpu1:100:200 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [receive] via NET/IB/0\n"
    seen = transport.observe(half)
    assert seen["nccl"]["gdr"] == "partial"
    judged = transport.judge("infiniband", {"NCCL_NET_GDR_LEVEL": "PHB"}, seen, "nccl", gpus_per_node=0)
    assert "nccl.gdr: asked on, ran over on in only some NET channels" in judged["mismatches"]


def test_nccl_socket_instead_of_ib_and_gdr_off_are_mismatches():
    socket = transport.judge("infiniband", {}, transport.observe(NCCL_SOCKET), "nccl", nccl=True)
    assert "nccl.network: asked IB, ran over Socket" in socket["mismatches"]
    gdr = transport.judge(
        "infiniband", {"NCCL_NET_GDR_LEVEL": "LOC"}, transport.observe(NCCL_IB_GDR), "nccl", nccl=True
    )
    assert gdr["mismatches"] == ["nccl.gdr: asked off, ran over on"]


def test_gloo_gradients_on_an_rdma_fabric_are_flagged_and_no_evidence_is_unverified():
    assert transport.judge("omnipath", {}, {}, "gloo")["verdict"] == "mismatch"
    assert transport.judge("ethernet", {}, {}, "gloo")["verdict"] == "unverified"


def test_the_transport_stage_turns_an_ok_run_into_transport_mismatch(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(OB1_TCP)
    result = {
        "status": "ok",
        "reason": None,
        "engine": "horovod",
        "env": {},
        "engine_info": {"controller": "mpi"},
        "spec": {"fabric": "infiniband", "gpus_per_node": 0},
    }
    result = {**result, **transport.fields(result, log)}
    assert result["status"] == "transport_mismatch"
    assert result["reason"] == (
        "asked for infiniband but mpi.pml: asked ucx, ran over ob1; mpi.btl: asked ^openib,tcp, ran over tcp"
    )


def test_nccl_reporting_only_where_nccl_runs():
    assert "NCCL_DEBUG" not in reporting_env(RunSpec())
    assert reporting_env(RunSpec(gpus_per_node=4))["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


TINY = [
    "--engine",
    "horovod",
    "--ranks",
    "2",
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "0",
    "--iters",
    "1",
    "--batches-per-iter",
    "1",
]
UCX_HERE = ["OMPI_MCA_pml=ucx", "OMPI_MCA_pml_ucx_tls=any", "OMPI_MCA_pml_ucx_devices=any"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "fabric, env, status, observed",
    [
        ("ethernet", ["OMPI_MCA_btl=self,tcp"], "ok", {"mpi": {"pml": ["ob1"], "btl": ["tcp"]}}),
        (None, [*UCX_HERE, "UCX_TLS=tcp,self"], "ok", {"mpi": {"pml": ["ucx"]}, "ucx": ["tcp"]}),
        ("ethernet", [*UCX_HERE, "UCX_TLS=tcp,self"], "transport_mismatch", {"mpi": {"pml": ["ucx"]}}),
    ],
    ids=["ethernet-ob1-tcp", "ucx-over-tcp", "ethernet-asked-but-ucx"],
)
def test_real_runs_record_the_transport_they_used(fabric, env, status, observed, tmp_path, monkeypatch):
    need(horovod_built_for("torch"), "Horovod with PyTorch is not installed (make setup)")
    monkeypatch.setenv("FABRIC_BENCH_STORE", str(tmp_path / "store.sqlite"))
    args = [*TINY, "--results", str(tmp_path)] + (["--fabric", fabric] if fabric else [])
    for pair in env:
        args += ["--env", pair]
    proc = fabric_bench("run", *args)
    (path,) = tmp_path.glob("*/result.json")
    result = json.loads(path.read_text())
    assert result["status"] == status, (result["reason"], proc.stdout[-2000:])
    assert proc.returncode == (0 if status == "ok" else 1)
    seen = result["transport"]["observed"]
    assert seen["mpi"]["pml"] == observed["mpi"]["pml"]
    if "btl" in observed["mpi"]:
        assert seen["mpi"]["btl"] == observed["mpi"]["btl"]
    if "ucx" in observed:
        assert seen["ucx"]["transports"] == observed["ucx"]
    if status == "ok":
        assert result["transport"]["verdict"] == "match"
    else:
        assert "asked for ethernet but mpi.pml: asked ob1, ran over ucx" in result["reason"]


# ------------------------------------------------------------ NICs used against the node's (issue 14)


def _recorded(name):
    return (Path(__file__).parents[1] / "data" / "nccl" / name / "nccl_info.log").read_text()


def test_nics_offered_and_used_are_counted_on_recorded_logs():
    a100 = transport.observe(_recorded("ib-gdrdma-a100"))["nccl"]
    assert a100["nics_offered"] == 9 and a100["nics_used"] == [0, 2, 4, 5]
    merged = transport.observe(_recorded("ibext-roce-sharp-plugin"))["nccl"]
    assert merged["nics_offered"] == 2  # two merged virtual NICs of two ports each


def test_four_gpus_over_four_nics_match_one_nic_for_eight_gpus_does_not():
    observed = transport.observe(_recorded("ib-gdrdma-a100"))
    ok = transport.judge(
        "infiniband", {"NCCL_IB_HCA": "=mlx5_8,mlx5_9,mlx5_10,mlx5_11"}, observed, "nccl", nccl=True, gpus_per_node=4
    )
    assert next(c for c in ok["checks"] if c["layer"] == "nccl.nics")["ok"]
    # the same channels on an 8-GPU node whose site lists 8 rails: 4 of 8 NICs used
    short = transport.judge(
        "infiniband",
        {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))},
        observed,
        "nccl",
        nccl=True,
        gpus_per_node=8,
    )
    assert short["verdict"] == "mismatch"
    assert any(m.startswith("nccl.nics: asked 8 of 8 NICs") for m in short["mismatches"])


def test_a_partial_node_expects_one_nic_per_rank_not_per_gpu():
    """8 GPUs and 8 rails per node, 4 ranks on it: NCCL driving 4 NICs is right (issue 29, item 8)."""
    observed = transport.observe(_recorded("ib-gdrdma-a100"))  # NET devices 0, 2, 4, 5 used
    eight_rails = {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}" for i in range(8))}
    partial = transport.judge("infiniband", eight_rails, observed, "nccl", nccl=True, gpus_per_node=8, ranks_per_node=4)
    assert next(c for c in partial["checks"] if c["layer"] == "nccl.nics")["ok"], partial["mismatches"]
    full = transport.judge("infiniband", eight_rails, observed, "nccl", nccl=True, gpus_per_node=8, ranks_per_node=8)
    assert any(m.startswith("nccl.nics: asked 8 of 8 NICs") for m in full["mismatches"])


def test_universal_over_libfabric_verbs_is_flagged():
    log = (
        "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is verbs;ofi_rxm (found 1 nics)\n"
        "h:1:1 [0] NCCL INFO Using network AWS Libfabric\n"
    )
    verdict = transport.judge("universal", {}, transport.observe(log), "nccl", nccl=True)
    assert verdict["verdict"] == "mismatch" and "verbs" in verdict["mismatches"][0]


def test_gpudirect_variables_of_the_profile_are_asked_for():
    asked = transport.asked_for("infiniband", {"UCX_IB_GPU_DIRECT_RDMA": "no", "NCCL_NET_GDR_LEVEL": "LOC"}, True)
    assert asked["UCX_IB_GPU_DIRECT_RDMA"] == "no" and asked["NCCL_NET_GDR_LEVEL"] == "LOC"


def test_the_path_mpi_gave_gpu_buffers_is_read_from_ucx_s_lanes():
    """MPI on GPU buffers (issue 49): the CUDA transports among UCX's endpoint lanes say how the bytes
    went; a log whose lanes hold none (these, recorded on host buffers here) does not confirm it."""
    from launch.results.transport import mpi_gpu_path

    env = {"UCX_TLS": "tcp,sm,self,cuda_copy", "UCX_IB_GPU_DIRECT_RDMA": "no"}
    for log in (UCX_TCP, UCX_SM):
        path = mpi_gpu_path(env, transport.observe(log))
        assert path["ucx_gpu_transports"] == [] and path["path"] == "unknown" and path["ucx_tls"] == env["UCX_TLS"]
    assert mpi_gpu_path(env, transport.observe(""))["ucx_gpu_transports"] is None  # no UCX lines at all
    assert mpi_gpu_path({"UCX_IB_GPU_DIRECT_RDMA": "yes"}, transport.observe(""))["path"] == "gpudirect-rdma"


def test_horovod_s_gradient_path_on_gpus_is_its_build_s_gpu_operations():
    from launch.results.transport import gradient_path

    def result(info: dict) -> dict:
        return {
            "engine": "horovod",
            "spec": {"gpus_per_node": 2},
            "engine_info": info,
            "env": {"HOROVOD_CPU_OPERATIONS": "mpi"},
        }

    assert gradient_path(result({"gpu_ops": "mpi", "nccl_built": False})) == "mpi"
    assert gradient_path(result({"gpu_ops": "nccl", "nccl_built": True})) == "nccl"
    assert gradient_path(result({"nccl_built": True})) == "nccl"  # results from before gpu_ops named MPI
    assert gradient_path({**result({"gpu_ops": "mpi"}), "spec": {"gpus_per_node": 0}}) == "mpi"  # CPU operations
