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
            **GLOO,
        }
    ),
    # fork() with registered memory: libfabric's efa provider (FI_EFA_FORK_SAFE, fi_efa(7)) and
    # rdma-core (RDMAV_FORK_SAFE, ibv_fork_init(3)) need to be told only on a kernel older than
    # 5.13; a newer one copies pinned pages on fork itself (containers.fabrics.profile.FORK_SAFE_KERNEL)
    fork_safe_env=frozen({"FI_EFA_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}),
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
    # aws-ofi-nccl built for AWS (--enable-platform-aws, above) requires libfabric >= 1.22: its
    # configure stops below it (m4/ax_platform_aws.m4, "On AWS platforms, Libfabric 1.22.0 or
    # later is required"), and at run time the plugin refuses the efa provider of an older
    # libfabric ("EFA provider requires at least libfabric version 1.22.0", src/nccl_ofi_net.cpp;
    # both as of aws-ofi-nccl 1.17.2, the pinned source)
    nccl_plugin_min_libfabric=(1, 22),
    self_test_tools=("ibv_devinfo",),
    detect=Detection("libfabric-provider", provider="efa"),
    nominal=(NominalLink("efa-4x100", 15e-6, 400.0),),
)
