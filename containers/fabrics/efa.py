"""AWS EFA: libfabric's efa provider for MPI, NCCL through the aws-ofi-nccl plugin."""

from __future__ import annotations

from containers.fabrics.common import GDRDRV, GLOO, VERBS_DEVICES, VERBS_NODES
from containers.fabrics.profile import Detection, FabricProfile, NominalLink, frozen, layer_packages

PROFILE = FabricProfile(
    name="efa",
    summary="AWS EFA: libfabric efa provider, Open MPI cm + ofi MTL, NCCL via aws-ofi-nccl",
    site_device_key="device",
    packages=layer_packages("ibverbs-utils", debian=("ibverbs-providers",)),
    source_builds=("aws-ofi-nccl",),
    configure_flags=frozen({"aws-ofi-nccl": ("--enable-platform-aws",)}),
    env=frozen(
        {
            "OMPI_MCA_pml": "cm",
            "OMPI_MCA_mtl": "ofi",
            "OMPI_MCA_mtl_ofi_provider_include": "efa",
            "FI_PROVIDER": "efa",
            "FI_EFA_FORK_SAFE": "1",
            "RDMAV_FORK_SAFE": "1",
            **GLOO,
        }
    ),
    nccl_env=frozen({"NCCL_NET": "OFI", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # FI_EFA_USE_DEVICE_RDMA is not a GPUDirect switch (fi_efa(7)): =0 only makes the
    # provider emulate RMA reads while the NIC still DMAs GPU memory, and =1 aborts on
    # EFA devices without RDMA read. Left to its default (on where the device has RDMA read);
    # GPUDirect is NCCL's choice to hand GPU buffers to the plugin: NCCL_NET_GDR_LEVEL.
    gpudirect_env=frozen({"on": frozen({"NCCL_NET_GDR_LEVEL": "PHB"}), "off": frozen({"NCCL_NET_GDR_LEVEL": "LOC"})}),
    binds=(VERBS_DEVICES,),
    gpudirect_binds=(GDRDRV,),
    device_nodes=(VERBS_NODES,),
    verbs=True,
    # aws-ofi-nccl on EFA needs libfabric >= 1.18 (the plugin's own requirement)
    nccl_plugin_min_libfabric=(1, 18),
    self_test_tools=("ibv_devinfo",),
    detect=Detection("libfabric-provider", provider="efa"),
    nominal=(NominalLink("efa-4x100", 15e-6, 400.0),),
)
