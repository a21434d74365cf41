"""HPE Slingshot 11: the host's libfabric (cxi provider) bound into the image; NCCL via aws-ofi-nccl."""

from __future__ import annotations

from containers.fabrics.common import GDRDRV, GLOO
from containers.fabrics.profile import Bind, Detection, DeviceNode, FabricProfile, NominalLink, frozen, layer_packages

PROFILE = FabricProfile(
    name="slingshot",
    summary="HPE Slingshot 11: the host's libfabric (cxi provider) bound in; NCCL via aws-ofi-nccl",
    site_device_key="device",
    # the host's cxi libfabric links libjson-c and libcurl
    packages=layer_packages("libjson-c5", "libcurl4"),
    source_builds=("aws-ofi-nccl",),
    configure_flags=frozen({"aws-ofi-nccl": ("--disable-platform-aws",)}),
    env=frozen(
        {
            "OMPI_MCA_pml": "cm",
            "OMPI_MCA_mtl": "ofi",
            "OMPI_MCA_mtl_ofi_provider_include": "cxi",
            "FI_PROVIDER": "cxi",
            "FI_CXI_DISABLE_HOST_REGISTER": "1",
            "FI_MR_CACHE_MONITOR": "userfaultfd",
            "FI_CXI_DEFAULT_CQ_SIZE": "131072",
            **GLOO,
        }
    ),
    # NCCL over cxi: HPE's published settings (HewlettPackard/shs-ccl-docs ccl_env.sh, as
    # quoted by Sigma2's "NCCL on Olivia" page, documentation.sigma2.no/hpc_machines/olivia/nccl.html;
    # the same set in Isambard-AI's env_vars.sh, docs.isambard.ac.uk): rendezvous by
    # alt_read with no eager data, hybrid receive matching, a larger TX queue.
    # NCCL_NET_GDR_LEVEL=PHB is part of that set on every run (NCCL's default is stricter
    # and leaves GPUDirect off where the NIC and GPU are not under one PCIe switch).
    nccl_env=frozen(
        {
            "NCCL_NET": "OFI",
            "NCCL_SOCKET_IFNAME": "{nic}",
            "NCCL_CROSS_NIC": "1",
            "NCCL_NET_GDR_LEVEL": "PHB",
            "FI_CXI_RDZV_PROTO": "alt_read",
            "FI_CXI_RDZV_EAGER_SIZE": "0",
            "FI_CXI_RDZV_THRESHOLD": "0",
            "FI_CXI_RDZV_GET_MIN": "0",
            "FI_CXI_DEFAULT_TX_SIZE": "2048",
            "FI_CXI_RX_MATCH_MODE": "hybrid",
        }
    ),
    # gdrcopy for libfabric's CUDA copies (Isambard-AI env_vars.sh: FI_HMEM_CUDA_USE_GDRCOPY=1)
    gpudirect_env=frozen(
        {
            "on": frozen({"NCCL_NET_GDR_LEVEL": "PHB", "FI_HMEM_CUDA_USE_GDRCOPY": "1"}),
            "off": frozen({"NCCL_NET_GDR_LEVEL": "LOC"}),
        }
    ),
    gpudirect_binds=(GDRDRV,),
    binds=(
        Bind("{host_libfabric}", "/opt/host/libfabric", why="host libfabric with the cxi provider"),
        Bind("{host_libcxi}", "/opt/host/libcxi/libcxi.so.1", why="libcxi, used by the cxi provider"),
        Bind("/dev/cxi*", why="Cassini NIC device nodes"),
    ),
    library_path=("/opt/host/libfabric", "/opt/host/libcxi"),
    site_path_keys=("host_libfabric", "host_libcxi"),
    device_nodes=(DeviceNode("/dev/cxi*", "Cassini NIC device nodes (cxi provider)"),),
    # The host's libfabric (bound in) is the one aws-ofi-nccl loads, so it must be at least what
    # the plugin was built against: the site recipe builds the plugin against libfabric 1.20
    # headers, and a library is only sure to provide the ABI its users were linked against from
    # that release on (1.20 adds the FABRIC_1.7 symbol version). The plugin also needs
    # FI_OPT_CUDA_API_PERMITTED (declared from libfabric 1.18 on) to keep libfabric off CUDA
    # calls while NCCL hands it GPU buffers: 1.20 covers both.
    nccl_plugin_min_libfabric=(1, 20),
    detect=Detection("libfabric-provider", provider="cxi"),
    nominal=(NominalLink("slingshot-200", 2e-6, 200.0),),
)
