"""RoCE v2: RDMA over Converged Ethernet. The same verbs stack as InfiniBand (rdma-core, Open MPI
over UCX, NCCL's IB transport), but an Ethernet port: a connection is addressed by a GID (an IP
address, one per RoCE version per address), packets carry a DSCP/traffic class that the switches'
lossless priority (PFC) and ECN marking key on. A wrong GID index silently picks RoCE v1 or a link-
local address; a wrong class lands in a lossy queue. So the site names both."""

from __future__ import annotations

from containers.fabrics.common import GDRDRV, GLOO, VERBS_CONFIG, VERBS_DEVICES, VERBS_NODES
from containers.fabrics.profile import (
    Detection,
    DeviceNode,
    FabricProfile,
    NominalLink,
    SiteKey,
    frozen,
    layer_packages,
)

PROFILE = FabricProfile(
    name="roce",
    summary="RoCE v2: rdma-core verbs on an Ethernet port, Open MPI over UCX (rc/ud), NCCL IB verbs "
    "with the site's GID index and traffic class",
    site_device_key="hca",
    # the GID table entry (a RoCE v2 one: `show_gids`, or /sys/class/infiniband/DEV/ports/1/gid_attrs/
    # types/N) and the traffic class (DSCP << 2, ECN bits low: 106 = DSCP 26, the lossless class many
    # RoCE fabrics use) that the switches' PFC priority and ECN marking key on
    site_keys=(
        SiteKey("gid_index", "a GID table index, 0-255", int, 0, 255),
        SiteKey("traffic_class", "an IP traffic class (DSCP << 2), 0-255", int, 0, 255),
    ),
    packages=layer_packages(
        "ibverbs-utils", "rdmacm-utils", "infiniband-diags", "perftest", debian=("ibverbs-providers", "librdmacm1")
    ),
    env=frozen(
        {
            # Open MPI 4.x over RoCE through UCX (its pml and one-sided osc); the openib btl is
            # deprecated beside UCX and tcp would quietly carry traffic UCX refused: both excluded
            "OMPI_MCA_pml": "ucx",
            "OMPI_MCA_osc": "ucx",
            "OMPI_MCA_btl": "^openib,tcp",
            # UCX's verbs transports (rc: reliable connected, ud: unreliable datagram for the
            # connection set-up and large jobs), shared memory within a node, self for a rank's own
            "UCX_TLS": "rc,ud,sm,self",
            # every RoCE port the site names as device:port (UCX takes all it finds otherwise,
            # a management port included)
            "UCX_NET_DEVICES": "{hca_ports}",
            # UCX's own names (`ucx_info -f`): the GID table entry and the IP traffic class of RoCE
            # packets; without them UCX takes its first RoCE v2 entry and class 0 (best effort)
            "UCX_IB_GID_INDEX": "{gid_index}",
            "UCX_IB_TRAFFIC_CLASS": "{traffic_class}",
            **GLOO,
        }
    ),
    # NCCL_IB_GID_INDEX / NCCL_IB_TC: NCCL's environment-variable documentation (the GID index
    # and the traffic class of its RoCE queue pairs); "=" makes NCCL_IB_HCA an exact list.
    # NCCL_NET=IB with NCCL_IB_DISABLE=0: NCCL's verbs transport (RoCE is verbs), never its socket
    # fallback; NCCL_SOCKET_IFNAME: the interface of its bootstrap (TCP) connections
    nccl_env=frozen(
        {
            "NCCL_IB_DISABLE": "0",
            "NCCL_NET": "IB",
            "NCCL_IB_HCA": "={hca}",
            "NCCL_IB_GID_INDEX": "{gid_index}",
            "NCCL_IB_TC": "{traffic_class}",
            "NCCL_SOCKET_IFNAME": "{nic}",
        }
    ),
    # as InfiniBand's (containers/fabrics/infiniband.py says why "try", and why "off" says no)
    gpudirect_env=frozen(
        {
            "on": frozen(
                {
                    "NCCL_NET_GDR_LEVEL": "PHB",
                    "UCX_IB_GPU_DIRECT_RDMA": "try",
                    "UCX_TLS": "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy",
                }
            ),
            "off": frozen(
                {"NCCL_NET_GDR_LEVEL": "LOC", "UCX_IB_GPU_DIRECT_RDMA": "no", "UCX_TLS": "rc,ud,sm,self,cuda_copy"}
            ),
        }
    ),
    binds=(VERBS_DEVICES, VERBS_CONFIG),
    gpudirect_binds=(GDRDRV,),
    # MPI on GPU buffers (a CUDA-aware Open MPI over UCX): UCX handles device memory only through
    # the CUDA transports in UCX_TLS (cuda_copy: copies staged through host memory; cuda_ipc: GPU to
    # GPU within a node; gdr_copy: the CPU reaching GPU memory through gdrcopy). GPUDirect "on"
    # insists on the HCA reading GPU memory: UCX_IB_GPU_DIRECT_RDMA=yes fails the device where it
    # cannot (openucx/ucx#5725) where "try" would stage quietly under an "on" label; "off" is
    # gpudirect_env's (no, cuda_copy only: every transfer staged); not asked: UCX chooses among all.
    mpi_gpu_env=frozen(
        {
            "default": frozen({"UCX_TLS": "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy"}),
            "on": frozen({"UCX_IB_GPU_DIRECT_RDMA": "yes"}),
            "off": frozen({"UCX_IB_GPU_DIRECT_RDMA": "no"}),
        }
    ),
    device_nodes=(VERBS_NODES, DeviceNode("/dev/infiniband/rdma_cm", "RDMA connection manager (rdmacm)", "warn")),
    verbs=True,
    self_test_tools=("ibv_devinfo",),
    detect=Detection("rdma-port", link_layer="Ethernet"),
    # RoCE v2 on 400GbE: InfiniBand's rate, Ethernet switch hops
    nominal=(NominalLink("roce-400", 3e-6, 400.0),),
)
