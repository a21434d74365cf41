"""Fabric profiles: the runtime side that launch/ consumes."""
from __future__ import annotations

import pytest

from containers import fabrics
from containers.fabrics import FABRICS, PROFILES

SITE = {"nic": "eth7", "hca": "mlx5_3", "host_libfabric": "/opt/cray/libfabric/2.1/lib64",
        "host_libcxi": "/usr/lib64/libcxi.so.1"}
PML = {"ethernet": "ob1", "infiniband": "ucx", "omnipath": "cm", "efa": "cm", "slingshot": "cm"}
FI_PROVIDER = {"ethernet": "tcp", "omnipath": "psm2", "efa": "efa", "slingshot": "cxi"}


def test_all_five_fabrics_and_the_control():
    assert FABRICS == ("ethernet", "infiniband", "omnipath", "efa", "slingshot", "universal")


@pytest.mark.parametrize("name", list(PML))
def test_environment_selects_the_fabric(name):
    env = PROFILES[name].environment(SITE)
    assert env["OMPI_MCA_pml"] == PML[name]
    assert env.get("FI_PROVIDER") == FI_PROVIDER.get(name)
    assert env["GLOO_SOCKET_IFNAME"] == "eth7"
    assert not any("{" in value for value in env.values()), env


def test_infiniband_names_the_hca_for_ucx_and_nccl():
    env = PROFILES["infiniband"].environment(SITE)
    assert env["UCX_NET_DEVICES"] == "mlx5_3:1" and env["NCCL_IB_HCA"] == "mlx5_3"
    assert env["UCX_TLS"] == "rc,ud,sm,self" and env["NCCL_IB_DISABLE"] == "0"


def test_ethernet_keeps_nccl_and_mpi_off_rdma():
    env = PROFILES["ethernet"].environment(SITE)
    assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_NET"] == "Socket"
    assert env["OMPI_MCA_btl_tcp_if_include"] == "eth7" and "tcp" in env["OMPI_MCA_btl"]


def test_nccl_and_gpudirect_parts_are_optional():
    efa = PROFILES["efa"]
    assert "NCCL_NET" not in efa.environment(SITE, nccl=False)
    assert efa.environment(SITE, gpudirect=True)["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert efa.environment(SITE, gpudirect=False)["FI_EFA_USE_DEVICE_RDMA"] == "0"
    assert "FI_EFA_USE_DEVICE_RDMA" not in efa.environment(SITE)


def test_missing_site_setting_is_named():
    with pytest.raises(KeyError, match="'hca'"):
        PROFILES["infiniband"].environment({"nic": "ib0"})
    assert PROFILES["infiniband"].placeholders() == {"nic", "hca"}


def test_binds_required_and_optional():
    ib = {b.host: b for b in PROFILES["infiniband"].bind_mounts(SITE)}
    assert ib["/dev/infiniband"].required and not ib["/etc/libibverbs.d"].required
    assert any(b.host == "/dev/hfi1_*" and b.required for b in PROFILES["omnipath"].binds)
    assert PROFILES["ethernet"].binds == ()
    assert all(not b.required for b in PROFILES["universal"].binds)


def test_slingshot_binds_the_host_libfabric_onto_the_image_library_path():
    sling = PROFILES["slingshot"]
    binds = sling.bind_mounts(SITE)
    libfabric = next(b for b in binds if b.host == SITE["host_libfabric"])
    assert libfabric.required and libfabric.target == "/opt/host/libfabric"
    assert libfabric.target in sling.library_path
    assert {"host_libfabric", "host_libcxi"} <= sling.placeholders()


def test_profiles_are_immutable_data():
    with pytest.raises(TypeError):
        PROFILES["efa"].env["FI_PROVIDER"] = "tcp"          # type: ignore[index]
    with pytest.raises(AttributeError):
        PROFILES["efa"].name = "x"                           # type: ignore[misc]


def test_unknown_fabric():
    with pytest.raises(ValueError, match="unknown fabric 'myrinet'"):
        fabrics.profile("myrinet")


def test_importing_fabrics_pulls_in_no_hpccm():
    import subprocess
    import sys
    code = "import sys, containers.fabrics; assert 'hpccm' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
