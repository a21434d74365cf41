"""The fabric registry: one module per fabric in this package, each defining `PROFILE`
(containers.fabrics.profile.FabricProfile: everything fabric-specific, as data).

Adding a fabric is a module here and its line in `_MODULES`; every consumer (recipe,
preflight, probe, site, transport, the CLI's help) loops over `PROFILES`. Importable
without hpccm: launch/ imports it.
"""
from __future__ import annotations

import importlib
from typing import Mapping

from containers.fabrics.profile import Bind, DeviceNode, Detection, FabricProfile, frozen, hca_ports

# the order users see: the baseline first, the control image last
_MODULES = ("ethernet", "infiniband", "omnipath", "efa", "slingshot", "universal")

PROFILES: Mapping[str, FabricProfile] = frozen(
    {p.name: p for p in (importlib.import_module(f"{__name__}.{m}").PROFILE for m in _MODULES)})
FABRICS = tuple(PROFILES)
HOST_FABRICS = tuple(name for name, p in PROFILES.items() if not p.control)  # what a host has; universal is an image

# the profiles by name, for modules that mean one of them
ETHERNET, INFINIBAND, OMNIPATH, EFA, SLINGSHOT, UNIVERSAL = (
    PROFILES[n] for n in ("ethernet", "infiniband", "omnipath", "efa", "slingshot", "universal"))

__all__ = ["Bind", "DeviceNode", "Detection", "FabricProfile", "PROFILES", "FABRICS", "HOST_FABRICS",
           "hca_ports", "profile", "ETHERNET", "INFINIBAND", "OMNIPATH", "EFA", "SLINGSHOT", "UNIVERSAL"]


def profile(name: str) -> FabricProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown fabric {name!r}; choose from {', '.join(FABRICS)}") from None
