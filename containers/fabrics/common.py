"""Pieces several fabric profiles share: gloo's interface, the verbs device nodes and config,
gdrcopy's device."""

from __future__ import annotations

from containers.fabrics.profile import Bind, DeviceNode

GLOO = {"GLOO_SOCKET_IFNAME": "{nic}", "HOROVOD_GLOO_IFACE": "{nic}"}
VERBS_DEVICES = Bind("/dev/infiniband", why="verbs device nodes (uverbs*, rdma_cm)")
VERBS_CONFIG = Bind("/etc/libibverbs.d", required=False, why="host verbs provider config, for host-matched providers")
VERBS_NODES = DeviceNode("/dev/infiniband/uverbs*", "verbs device nodes (rdma-core)")
# gdrcopy's device: Apptainer's minimal /dev drops it, and UCX (gdr_copy), NCCL (GDRCOPY)
# and libfabric (FI_HMEM_CUDA_USE_GDRCOPY) then lose gdrcopy silently. Not required:
# preflight warns when the host has no gdrdrv module loaded.
GDRDRV = Bind("/dev/gdrdrv", required=False, why="gdrcopy (GPU memory copies by CPU mapping)")
