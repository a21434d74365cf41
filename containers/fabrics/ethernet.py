"""Ethernet: TCP/IP only. The baseline every site has, and the fabric the emulated clusters shape."""

from __future__ import annotations

from containers import ompi_rules
from containers.fabrics.common import GLOO
from containers.fabrics.profile import Detection, FabricProfile, NominalLink, frozen

PROFILE = FabricProfile(
    name="ethernet",
    summary="TCP/IP only: Open MPI ob1 + tcp BTL, UCX/libfabric tcp, NCCL sockets",
    env=frozen(
        {
            "OMPI_MCA_pml": "ob1",
            "OMPI_MCA_btl": "self,vader,tcp",
            "OMPI_MCA_btl_tcp_if_include": "{nic}",
            "OMPI_MCA_oob_tcp_if_include": "{nic}",
            # Two TCP connections per peer: over one, one iteration in six of the segmented ring
            # below stalled ~0.3 s on emulated 1 Gbit links (mpi and horovod; none seen over two)
            "OMPI_MCA_btl_tcp_links": "2",
            "UCX_TLS": "tcp,sm,self",
            "UCX_NET_DEVICES": "{nic}",
            "FI_PROVIDER": "tcp",
            "FI_TCP_IFACE": "{nic}",
            **GLOO,
        }
    ),
    nccl_env=frozen({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # Large allreduces as a segmented ring: the reduction of one segment overlaps the
    # transfer of the next. Open MPI 4.1's fixed choice for 2 ranks (emulated 5 Gbit links,
    # in place) reaches 0.87 of the link at 64 MiB, this 0.98. Segments of 1 MiB or more
    # halved Horovod's rate on 1 Gbit links (0.51: every iteration stalled); 256 KiB
    # reached 0.96 at 1 and 5 Gbit for mpi and horovod. Below 16 MiB the fixed choice was
    # as fast or faster (benchmarks/fabric_emulation.py).
    # MPI on GPU buffers: Open MPI's UCX PML over UCX's tcp and CUDA transports (UCX is Open MPI's
    # preferred CUDA-aware path; ob1's tcp BTL is left to host buffers). TCP has no RDMA: GPUDirect
    # "on" lets UCX use the GPU-side paths (cuda_ipc between GPUs of a node, gdr_copy), "off" stages
    # every transfer through host memory (cuda_copy only).
    mpi_gpu_env=frozen(
        {
            "default": frozen({"OMPI_MCA_pml": "ucx", "UCX_TLS": "tcp,sm,self,cuda_copy,cuda_ipc,gdr_copy"}),
            "on": frozen({"OMPI_MCA_pml": "ucx", "UCX_TLS": "tcp,sm,self,cuda_copy,cuda_ipc,gdr_copy"}),
            "off": frozen({"OMPI_MCA_pml": "ucx", "UCX_TLS": "tcp,sm,self,cuda_copy"}),
        }
    ),
    ompi_coll_rules=(ompi_rules.Rule("allreduce", 16 * 2**20, "segmented_ring", segment_bytes=256 * 2**10),),
    sockets=True,
    detect=Detection("interface"),
    nominal=(NominalLink("25GbE", 10e-6, 25.0),),
)
