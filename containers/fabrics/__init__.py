"""The fabric registry: one module per fabric in this package, each defining `PROFILE`
(containers.fabrics.profile.FabricProfile: everything fabric-specific, as data).

Adding a fabric is a module here and its line in `_MODULES`; every consumer (recipe,
preflight, probe, site, transport, the CLI's help) loops over `PROFILES`. Importable
without hpccm: launch/ imports it. `profile` is the one lookup of a run's fabric name,
an emulated one (`emu-eth-<rate>`, launch.fleet.emulate) included: ethernet's variant.
"""

from __future__ import annotations

import importlib
from typing import Mapping

from containers.fabrics.profile import Bind, DeviceNode, Detection, FabricProfile, SiteKey, frozen, hca_ports

# the order users see: the baseline first, the control image last
_MODULES = ("ethernet", "infiniband", "roce", "omnipath", "efa", "slingshot", "universal")

PROFILES: Mapping[str, FabricProfile] = frozen(
    {p.name: p for p in (importlib.import_module(f"{__name__}.{m}").PROFILE for m in _MODULES)}
)
FABRICS = tuple(PROFILES)
HOST_FABRICS = tuple(name for name, p in PROFILES.items() if not p.control)  # what a host has; universal is an image

# the profiles by name, for modules that mean one of them
ETHERNET, INFINIBAND, OMNIPATH, EFA, SLINGSHOT, UNIVERSAL = (
    PROFILES[n] for n in ("ethernet", "infiniband", "omnipath", "efa", "slingshot", "universal")
)

# ethernet over an emulated cluster's shaped links: emu-eth-1g, emu-eth-10g (launch.fleet.emulate.links
# reads the rate); the profile is ethernet's, the name the run's
EMULATED_PREFIX = "emu-"

__all__ = [
    "Bind",
    "DeviceNode",
    "Detection",
    "FabricProfile",
    "SiteKey",
    "PROFILES",
    "FABRICS",
    "HOST_FABRICS",
    "EMULATED_PREFIX",
    "hca_ports",
    "is_emulated",
    "profile",
    "ETHERNET",
    "INFINIBAND",
    "OMNIPATH",
    "EFA",
    "SLINGSHOT",
    "UNIVERSAL",
]


def is_emulated(name: str | None) -> bool:
    """Whether a fabric name is an emulated cluster's (emu-eth-<rate>)."""
    return bool(name) and str(name).lower().startswith(EMULATED_PREFIX)


def profile(name: str) -> FabricProfile:
    """The profile a fabric name selects: an emulated fabric is ethernet's variant."""
    if is_emulated(name):
        return ETHERNET
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown fabric {name!r}; choose from {', '.join(FABRICS)}") from None
