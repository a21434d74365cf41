"""Omni-Path: libpsm2 for MPI and libfabric; NCCL over the hfi1 verbs device."""

from __future__ import annotations

from containers.fabrics.common import GDRDRV, GLOO, VERBS_CONFIG
from containers.fabrics.profile import Bind, Detection, DeviceNode, FabricProfile, NominalLink, frozen, layer_packages

PROFILE = FabricProfile(
    name="omnipath",
    summary="Omni-Path: libpsm2, Open MPI cm + psm2 MTL, libfabric psm2; NCCL over hfi1 verbs",
    site_device_key="hca",
    packages=layer_packages("libnuma1", "ibverbs-utils", debian=("libpsm2-2", "libpsm2-2-compat", "ibverbs-providers")),
    # libpsm2 and libfabric's psm2 provider are in the common stack (Open MPI's psm2
    # MTL is built against libpsm2 there); nothing is built in this layer.
    env=frozen(
        {
            "OMPI_MCA_pml": "cm",
            "OMPI_MCA_mtl": "psm2",
            "FI_PROVIDER": "psm2",
            "PSM2_DEVICES": "self,shm,hfi",
            **GLOO,
        }
    ),
    nccl_env=frozen({"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", "NCCL_IB_HCA": "={hca}", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # No PSM2_CUDA / PSM2_GPUDIRECT: the stack's libpsm2 is built without PSM_CUDA (it needs
    # the CUDA hfi1 driver's headers; containers.recipe), and such a libpsm2 ignores both, so
    # MPI over psm2 carries host buffers only (no mpi_gpu_env: preflight refuses MPI on GPU
    # buffers here). GPUDirect here is NCCL's, over hfi1 verbs.
    gpudirect_env=frozen(
        {
            "on": frozen({"NCCL_NET_GDR_LEVEL": "PHB"}),
            "off": frozen({"NCCL_NET_GDR_LEVEL": "LOC"}),
        }
    ),
    gpudirect_binds=(GDRDRV,),
    binds=(
        Bind("/dev/hfi1_*", why="HFI device nodes used by libpsm2"),
        Bind("/dev/infiniband", required=False, why="hfi1 verbs (NCCL's IB transport)"),
        VERBS_CONFIG,
    ),
    device_nodes=(
        DeviceNode("/dev/hfi1_*", "HFI device nodes (libpsm2)"),
        DeviceNode("/dev/infiniband/uverbs*", "hfi1 verbs (NCCL's IB transport)", nccl_only=True),
    ),
    verbs=True,
    psm2=True,
    detect=Detection("rdma-port", device_prefix="hfi1", library="libpsm2"),
    nominal=(NominalLink("omnipath-100", 1.5e-6, 100.0),),
)
