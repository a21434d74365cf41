"""Fabric profiles: the runtime side that launch/ consumes."""

from __future__ import annotations

import pytest

from containers import fabrics
from containers.fabrics import FABRICS, PROFILES

SITE = {
    "nic": "eth7",
    "hca": "mlx5_3",
    "host_libfabric": "/opt/cray/libfabric/2.1/lib64",
    "host_libcxi": "/usr/lib64/libcxi.so.1",
    "gid_index": "3",
    "traffic_class": "106",
}
PML = {"ethernet": "ob1", "infiniband": "ucx", "roce": "ucx", "omnipath": "cm", "efa": "cm", "slingshot": "cm"}
FI_PROVIDER = {"ethernet": "tcp", "omnipath": "psm2", "efa": "efa", "slingshot": "cxi"}


def test_all_six_fabrics_and_the_control():
    assert FABRICS == ("ethernet", "infiniband", "roce", "omnipath", "efa", "slingshot", "universal")


def test_roce_names_its_gid_index_and_traffic_class_for_ucx_and_nccl():
    """Issue 38: what RoCE needs beyond InfiniBand's verbs settings reaches both libraries."""
    env = PROFILES["roce"].environment(SITE)
    assert env["NCCL_IB_GID_INDEX"] == env["UCX_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_TC"] == env["UCX_IB_TRAFFIC_CLASS"] == "106"
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"] == "=mlx5_3" and env["UCX_NET_DEVICES"] == "mlx5_3:1"
    assert PROFILES["roce"].detect.link_layer == "Ethernet" != PROFILES["infiniband"].detect.link_layer
    with pytest.raises(KeyError, match="fabric 'roce' needs the site setting 'gid_index'"):
        PROFILES["roce"].environment({k: v for k, v in SITE.items() if k != "gid_index"})


@pytest.mark.parametrize("name", list(PML))
def test_environment_selects_the_fabric(name):
    env = PROFILES[name].environment(SITE)
    assert env["OMPI_MCA_pml"] == PML[name]
    assert env.get("FI_PROVIDER") == FI_PROVIDER.get(name)
    assert env["GLOO_SOCKET_IFNAME"] == "eth7"
    assert not any("{" in value for value in env.values()), env


def test_infiniband_names_the_hca_for_ucx_and_nccl():
    env = PROFILES["infiniband"].environment(SITE)
    # "=" makes NCCL_IB_HCA exact: plain "mlx5_1" would also match mlx5_10, mlx5_11
    assert env["UCX_NET_DEVICES"] == "mlx5_3:1" and env["NCCL_IB_HCA"] == "=mlx5_3"
    assert env["UCX_TLS"] == "rc,ud,sm,self" and env["NCCL_IB_DISABLE"] == "0"


def test_rails_reach_ucx_and_nccl_as_lists():
    env = PROFILES["infiniband"].environment({**SITE, "hca": "mlx5_0,mlx5_1,mlx5_10"})
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1,mlx5_10:1"
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_10"


def test_gpudirect_off_turns_off_what_each_library_reads():
    ib_off = PROFILES["infiniband"].environment(SITE, gpudirect=False)
    assert ib_off["UCX_IB_GPU_DIRECT_RDMA"] == "no" and ib_off["NCCL_NET_GDR_LEVEL"] == "LOC"
    # "on" asks UCX to try: "yes" fails MPI_Init on hosts without nvidia-peermem's sysfs file
    assert PROFILES["infiniband"].environment(SITE, gpudirect=True)["UCX_IB_GPU_DIRECT_RDMA"] == "try"
    assert "gdr_copy" not in ib_off["UCX_TLS"]
    binds = {b.host for b in PROFILES["infiniband"].bind_mounts(SITE, gpudirect=True)}
    assert "/dev/gdrdrv" in binds and "/dev/gdrdrv" not in {b.host for b in PROFILES["infiniband"].bind_mounts(SITE)}


def test_omnipath_asks_nothing_of_libpsm2_that_its_build_ignores():
    """The stack's libpsm2 is built without PSM_CUDA: PSM2_CUDA/PSM2_GPUDIRECT would do nothing."""
    from containers import recipe

    stack = recipe.render("stack", "cuda")
    assert "opa-psm2" in stack.dockerfile and "PSM_CUDA" not in stack.dockerfile + stack.devel_template
    opa = PROFILES["omnipath"]
    for nccl in (True, False):
        for gpudirect in (True, False, None):
            assert not {"PSM2_CUDA", "PSM2_GPUDIRECT"} & set(opa.environment(SITE, nccl=nccl, gpudirect=gpudirect))


def test_slingshot_asks_nccl_for_gpudirect_on_every_nccl_run():
    """HPE's published cxi settings set NCCL_NET_GDR_LEVEL=PHB always; --gpudirect off still turns it off."""
    sling = PROFILES["slingshot"]
    assert sling.environment(SITE, nccl=True)["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert sling.environment(SITE, nccl=True, gpudirect=False)["NCCL_NET_GDR_LEVEL"] == "LOC"


def test_slingshot_nccl_carries_hpes_cxi_settings():
    env = PROFILES["slingshot"].environment(SITE, nccl=True, gpudirect=True)
    assert env["FI_CXI_RDZV_PROTO"] == "alt_read" and env["FI_CXI_RX_MATCH_MODE"] == "hybrid"
    assert env["FI_CXI_DEFAULT_TX_SIZE"] == "2048" and env["FI_HMEM_CUDA_USE_GDRCOPY"] == "1"
    assert "FI_CXI_RDZV_PROTO" not in PROFILES["slingshot"].environment(SITE, nccl=False)


def test_ethernet_keeps_nccl_and_mpi_off_rdma():
    env = PROFILES["ethernet"].environment(SITE)
    assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_NET"] == "Socket"
    assert env["OMPI_MCA_btl_tcp_if_include"] == "eth7" and "tcp" in env["OMPI_MCA_btl"]


def test_nccl_and_gpudirect_parts_are_optional():
    efa = PROFILES["efa"]
    assert "NCCL_NET" not in efa.environment(SITE, nccl=False)
    # FI_EFA_USE_DEVICE_RDMA is no GPUDirect switch (=0 still DMAs GPU memory, =1 aborts
    # without RDMA read): GPUDirect is NCCL's NCCL_NET_GDR_LEVEL
    assert efa.environment(SITE, gpudirect=False)["NCCL_NET_GDR_LEVEL"] == "LOC"
    assert efa.environment(SITE, gpudirect=True)["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert not any("FI_EFA_USE_DEVICE_RDMA" in efa.environment(SITE, gpudirect=g) for g in (True, False, None))


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
        PROFILES["efa"].env["FI_PROVIDER"] = "tcp"  # type: ignore[index]
    with pytest.raises(AttributeError):
        PROFILES["efa"].name = "x"  # type: ignore[misc]


def test_unknown_fabric():
    with pytest.raises(ValueError, match="unknown fabric 'myrinet'"):
        fabrics.profile("myrinet")


def test_importing_fabrics_pulls_in_no_hpccm():
    import subprocess
    import sys

    code = "import sys, containers.fabrics; assert 'hpccm' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_site_path_keys_are_the_host_placeholders_of_the_presets():
    from containers.fabrics import HOST_FABRICS, PROFILES

    for name, prof in PROFILES.items():
        assert set(prof.site_path_keys) == {p for p in prof.placeholders() if p.startswith("host_")}, name
        assert prof.site_device_key in (None, "hca", "device")
        assert (prof.site_device_key == "hca") == ("hca" in prof.placeholders()), name
        # every other placeholder is a key the profile declares (SiteKey): the site file checks it
        declared = {"nic", "hca", *prof.site_path_keys, *(key.name for key in prof.site_keys)}
        assert prof.placeholders() <= declared, name
    assert "universal" not in HOST_FABRICS and len(HOST_FABRICS) == len(PROFILES) - 1
