"""Fabric presets: a fabric profile (containers.fabrics) made concrete for one
run on one site: the environment that selects the fabric and the host paths to
bind into the container. Only paths that exist are bound; a missing required
path is reported so preflight can refuse the run.
"""
from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

from containers import ompi_rules
from containers.fabrics import ETHERNET, profile
from launch.fleet.emulate import fabric_env as emulated_fabric_env, fabric_profile, is_emulated_fabric
from launch.errors import UsageError
from launch.ranks.launchers import launcher_of
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import Bind
from launch.site.config import Site


@dataclass(frozen=True)
class Preset:
    fabric: str | None
    env: dict[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    missing: tuple[str, ...] = ()  # required host paths absent here ("path: why")
    link_gbit_s: float | None = None  # the site's line rate per NIC (launch.results.plausibility)


def default_route_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of this host's IPv4 default route."""
    try:
        lines = Path(route_table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def site_values(spec: RunSpec, site: Site) -> dict[str, str]:
    fabric_site = site.fabrics.get(spec.fabric) if spec.fabric else None
    if fabric_site is None:
        where = site.path or "the default site (ethernet only)"
        raise UsageError(f"fabric {spec.fabric!r} is not present in {where}; add [fabrics.{spec.fabric}]",
                         fields=("fabric",))
    values = {}
    # an IP-interface fabric (ethernet) without one named takes the default route's
    by_interface = bool(spec.fabric) and profile(str(spec.fabric)).detect.kind == "interface"
    nic = fabric_site.interface or (default_route_interface() if by_interface else None)
    if nic:
        values["nic"] = nic
    if fabric_site.device:  # one device or rails: NCCL_IB_HCA="={hca}" matches exactly these
        values["hca"] = ",".join(fabric_site.devices)  # {hca_ports} follows (containers.fabrics.hca_ports)
    values.update(fabric_site.host_paths)
    return values


def site_binds(site: Site) -> list[Bind]:
    binds = []
    for entry in site.binds:
        source, _, rest = entry.partition(":")
        target, _, options = rest.partition(":")
        binds.append(Bind(source, target or source, readonly=options == "ro"))
    return binds


def resolve(spec: RunSpec, site: Site) -> Preset:
    """The preset for spec.fabric, then the site's own [env] over it (a site knows its nodes:
    its NCCL_IB_HCA or UCX_NET_DEVICES win over the profile's), and the site's binds."""
    env: dict[str, str] = {}
    binds = site_binds(site)
    if spec.fabric is None:
        return Preset(None, dict(site.env), tuple(binds))
    if is_emulated_fabric(spec.fabric):  # ethernet over an emulated cluster's links (launch.fleet.emulate)
        return Preset(spec.fabric, {**site.env, **emulated_fabric_env(spec)}, tuple(binds))
    try:
        fabric = profile(spec.fabric)
    except ValueError as exc:
        raise UsageError(str(exc), fields=("fabric",)) from None
    values = site_values(spec, site)
    gpudirect = None if spec.gpudirect is None else spec.gpudirect == "on"
    try:
        env.update(fabric.environment(values, nccl=spec.uses_nccl, gpudirect=gpudirect))
        env.update(site.env)
        mounts = fabric.bind_mounts(values, gpudirect=gpudirect)
    except KeyError as exc:
        raise UsageError(f"{exc.args[0]} (set it under [fabrics.{spec.fabric}] in the site file)",
                         fields=("fabric",)) from None
    missing = []
    for mount in mounts:
        found = sorted(glob.glob(mount.host))
        if not found and mount.required:
            missing.append(f"{mount.host}: {mount.why}")
        for path in found:
            target = path if mount.target == mount.host else mount.target
            binds.append(Bind(path, target))
    link = site.fabrics[spec.fabric].link_gbit_s if spec.fabric in site.fabrics else None
    return Preset(spec.fabric, env, tuple(binds), tuple(missing), link)


def ompi_coll_rules(spec: RunSpec, site: Site) -> str | None:
    """The text of the run's Open MPI collective rules file (emulated links: ethernet's), or
    None: the fabric has none, or the site's or the run's own environment steers coll/tuned."""
    if ompi_rules.tuned_by_user({**site.env, **spec.extra_env}):
        return None
    if spec.fabric is None and not launcher_of(spec).emulated:
        return None
    fabric = fabric_profile(spec.fabric) if spec.fabric else ETHERNET  # an emulated cluster's links are ethernet
    return ompi_rules.render(fabric.ompi_coll_rules) if fabric.ompi_coll_rules else None
