"""InfiniBand: rdma-core verbs, Open MPI over UCX, NCCL's IB transport (RoCE: roce.py)."""

from __future__ import annotations

from containers.fabrics.common import GDRDRV, GLOO, VERBS_CONFIG, VERBS_DEVICES, VERBS_NODES
from containers.fabrics.profile import Detection, DeviceNode, FabricProfile, NominalLink, frozen, layer_packages

PROFILE = FabricProfile(
    name="infiniband",
    summary="InfiniBand: rdma-core verbs, Open MPI over UCX (rc/ud), NCCL IB verbs",
    site_device_key="hca",
    packages=layer_packages(
        "ibverbs-utils", "rdmacm-utils", "infiniband-diags", "perftest", debian=("ibverbs-providers", "librdmacm1")
    ),
    env=frozen(
        {
            "OMPI_MCA_pml": "ucx",
            "OMPI_MCA_osc": "ucx",
            "OMPI_MCA_btl": "^openib,tcp",
            # every rail as device:port (UCX_NET_DEVICES=mlx5_0:1 alone would pin UCX to one NIC)
            "UCX_TLS": "rc,ud,sm,self",
            "UCX_NET_DEVICES": "{hca_ports}",
            **GLOO,
        }
    ),
    # NCCL_IB_HCA is a prefix list: "mlx5_1" also matches mlx5_10, mlx5_11; a leading "="
    # makes it exact (NCCL's environment-variable documentation, NCCL_IB_HCA)
    nccl_env=frozen({"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", "NCCL_IB_HCA": "={hca}", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # GPUDirect RDMA for MPI over UCX is the HCA reading GPU memory: UCX_IB_GPU_DIRECT_RDMA
    # (`ucx_info -f`: yes|no|try, default try). "yes" fails the device, and MPI_Init with it,
    # wherever UCX finds no peer-memory driver file (UCX 1.13's ib_md.c looks for
    # /sys/kernel/mm/memory_peers/nv_mem/version only; DMA-BUF-only hosts have none), while
    # NCCL's own GPUDirect works there. Where NCCL carries the GPU buffers "on" asks UCX to try;
    # whether GPUDirect ran is read from NCCL's log (a run handing them to MPI: mpi_gpu_env).
    # Dropping gdr_copy/cuda_ipc from UCX_TLS alone leaves it on: "off" says no.
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
    detect=Detection("rdma-port", link_layer="InfiniBand"),
    nominal=(NominalLink("infiniband-hdr-200", 1.5e-6, 200.0), NominalLink("infiniband-ndr-400", 1.5e-6, 400.0)),
)
