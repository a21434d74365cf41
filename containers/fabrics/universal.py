"""The control image: every fabric's user-space libraries in one image, transports left to
auto-selection (does the fabric-specific image change anything against it?)."""

from __future__ import annotations

from containers.fabrics import efa, infiniband, omnipath
from containers.fabrics.common import GLOO, VERBS_CONFIG, VERBS_DEVICES
from containers.fabrics.profile import Bind, FabricProfile, frozen

_LIBRARIES_OF = (infiniband.PROFILE, omnipath.PROFILE, efa.PROFILE)

PROFILE = FabricProfile(
    name="universal",
    summary="control: every fabric's libraries in one image; transports left to auto-selection",
    packages=frozen(
        {
            flavour: tuple(dict.fromkeys(pkg for profile in _LIBRARIES_OF for pkg in profile.packages.get(flavour, ())))
            for flavour in infiniband.PROFILE.packages
        }
    ),
    source_builds=("aws-ofi-nccl",),
    configure_flags=frozen({"aws-ofi-nccl": ()}),
    env=frozen(GLOO),
    nccl_env=frozen({"NCCL_SOCKET_IFNAME": "{nic}"}),
    binds=tuple(
        Bind(b.host, b.container, False, b.why)
        for b in (VERBS_DEVICES, VERBS_CONFIG, Bind("/dev/hfi1_*", why="Omni-Path HFI device nodes"))
    ),
    verbs=True,
    sockets=True,
    psm2=True,
    self_test_tools=("ibv_devinfo",),
    control=True,
)
