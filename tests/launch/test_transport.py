"""Transport evidence: parsing what the libraries report, judging it against the
fabric asked for, and real runs here over ob1/tcp, UCX/tcp and a wrong selection."""
import json

import pytest

from launch import transport
from launch.run import horovod_built_for
from launch.runspec import RunSpec
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


def test_ethernet_over_ob1_tcp_matches():
    verdict = transport.judge("ethernet", {}, transport.observe(OB1_TCP), "mpi")
    assert verdict["verdict"] == "match" and {c["layer"] for c in verdict["checks"]} == {"mpi.pml", "mpi.btl"}


def test_infiniband_that_ran_over_tcp_is_a_mismatch():
    verdict = transport.judge("infiniband", {}, transport.observe(OB1_TCP), "mpi")
    assert verdict["verdict"] == "mismatch"
    assert verdict["mismatches"] == ["mpi.pml: asked ucx, ran over ob1", "mpi.btl: asked ^openib,tcp, ran over tcp"]
    ucx = transport.judge("infiniband", {}, transport.observe(UCX_TCP), "mpi")
    assert "ucx.transports: asked rc,ud,sm,self, ran over tcp" in ucx["mismatches"]


def test_nccl_socket_instead_of_ib_and_gdr_off_are_mismatches():
    socket = transport.judge("infiniband", {}, transport.observe(NCCL_SOCKET), "nccl", nccl=True)
    assert "nccl.network: asked IB, ran over Socket" in socket["mismatches"]
    gdr = transport.judge("infiniband", {"NCCL_NET_GDR_LEVEL": "LOC"}, transport.observe(NCCL_IB_GDR), "nccl",
                          nccl=True)
    assert gdr["mismatches"] == ["nccl.gdr: asked off, ran over on"]


def test_gloo_gradients_on_an_rdma_fabric_are_flagged_and_no_evidence_is_unverified():
    assert transport.judge("omnipath", {}, {}, "gloo")["verdict"] == "mismatch"
    assert transport.judge("ethernet", {}, {}, "gloo")["verdict"] == "unverified"


def test_apply_turns_an_ok_run_into_transport_mismatch(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(OB1_TCP)
    result = {"status": "ok", "reason": None, "engine": "horovod", "env": {}, "engine_info": {"controller": "mpi"},
              "spec": {"fabric": "infiniband", "gpus_per_node": 0}}
    transport.apply(result, log)
    assert result["status"] == "transport_mismatch"
    assert result["reason"] == ("asked for infiniband but mpi.pml: asked ucx, ran over ob1; "
                                "mpi.btl: asked ^openib,tcp, ran over tcp")


def test_nccl_reporting_only_where_nccl_runs():
    assert "NCCL_DEBUG" not in transport.reporting_env(RunSpec())
    assert transport.reporting_env(RunSpec(gpus_per_node=4))["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


TINY = ["--engine", "horovod", "--ranks", "2", "--model", "resnet18", "--image-size", "32", "--batch-size", "8",
        "--warmup", "0", "--iters", "1", "--batches-per-iter", "1"]
UCX_HERE = ["OMPI_MCA_pml=ucx", "OMPI_MCA_pml_ucx_tls=any", "OMPI_MCA_pml_ucx_devices=any"]


@pytest.mark.slow
@pytest.mark.parametrize("fabric, env, status, observed", [
    ("ethernet", ["OMPI_MCA_btl=self,tcp"], "ok", {"mpi": {"pml": ["ob1"], "btl": ["tcp"]}}),
    (None, [*UCX_HERE, "UCX_TLS=tcp,self"], "ok", {"mpi": {"pml": ["ucx"]}, "ucx": ["tcp"]}),
    ("ethernet", [*UCX_HERE, "UCX_TLS=tcp,self"], "transport_mismatch", {"mpi": {"pml": ["ucx"]}}),
], ids=["ethernet-ob1-tcp", "ucx-over-tcp", "ethernet-asked-but-ucx"])
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
