"""Fabric presets: a fabric profile (containers.fabrics) made concrete for one run on one
site, resolved once (`resolve`) into one value, the Preset, that the plan, the launchers,
preflight and the result read: the environment that selects the fabric, the host paths to
bind into the container, the device nodes the run opens and the text of its Open MPI
collective rules. Only paths that exist are bound; a missing required path is reported so
preflight can refuse the run. What the preset decided from this host rather than from the
profile and the site file (the fork-safety variables, by the kernel) it keeps in `decisions`,
which the result records (launch.fabric_preset).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from containers import ompi_rules
from containers.fabrics import ETHERNET, DeviceNode, FabricProfile, is_emulated, profile
from containers.fabrics.profile import FORK_SAFE_KERNEL
from launch.errors import UsageError
from launch.ranks.emulated import fabric_env as emulated_fabric_env
from launch.ranks.launchers import launcher_of
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import RUNTIMES, Bind
from launch.site.config import FabricSite, Site


@dataclass(frozen=True)
class Preset:
    fabric: str | None
    env: dict[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    missing: tuple[str, ...] = ()  # required host paths absent here ("path: why")
    link_gbit_s: float | None = None  # the site's line rate per NIC (launch.results.plausibility)
    profile: FabricProfile | None = None  # the profile the run's traffic follows (emulated links: ethernet's)
    device_nodes: tuple[DeviceNode, ...] = ()  # the profile's nodes this run opens (preflight)
    coll_rules: str | None = None  # the text of the run's Open MPI collective rules file
    # what was decided from this host, and why: {"fork_safety": {...}} (fork_safety below)
    decisions: dict = field(default_factory=dict)


def kernel_release() -> str:
    """This host's kernel release (`uname -r`): the host that makes the preset."""
    return os.uname().release


def kernel_host() -> str:
    """The name of the host whose kernel kernel_release reads."""
    return os.uname().nodename


def kernel_version(release: str) -> tuple[int, int] | None:
    """'5.10.0-28-amd64' -> (5, 10); '4.18.0-553.el8_10.x86_64' -> (4, 18); None where the
    release does not start with MAJOR.MINOR."""
    match = re.match(r"\s*(\d+)\.(\d+)", release or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def fork_safety(fabric: FabricProfile, release: str, read_on: str = "") -> tuple[bool, dict | None]:
    """Whether the run sets the profile's fork_safe_env, and the record of why (None: the
    profile has none). Set on a kernel older than FORK_SAFE_KERNEL and on one whose release
    cannot be read (setting them is harmless where the kernel copies pinned pages itself:
    rdma-core then ignores them); left out from FORK_SAFE_KERNEL on. `read_on`: the host
    whose kernel `release` is (empty: given, not read)."""
    if not fabric.fork_safe_env:
        return False, None
    version, floor = kernel_version(release), ".".join(map(str, FORK_SAFE_KERNEL))
    if version is None:
        needed, why = True, f"kernel release {release!r} not read as MAJOR.MINOR: set, to be safe"
    elif version < FORK_SAFE_KERNEL:
        needed, why = True, f"kernel {version[0]}.{version[1]} < {floor}: fork() does not copy pinned DMA pages"
    else:
        needed, why = False, f"kernel {version[0]}.{version[1]} >= {floor} copies pinned DMA pages on fork()"
    return needed, {
        "kernel": release,
        # a batch or srun run's ranks run on other nodes: their kernel is assumed to be this one's
        "read_on": read_on or None,
        "variables": sorted(fabric.fork_safe_env),
        "set": needed,
        "why": why,
    }


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


def site_values(fabric: FabricProfile, fabric_site: FabricSite) -> dict[str, str]:
    """The values a profile's placeholders take on this site (containers.fabrics.profile)."""
    values = {}
    # an IP-interface fabric (ethernet) without one named takes the default route's
    nic = fabric_site.interface or (default_route_interface() if fabric.detect.kind == "interface" else None)
    if nic:
        values["nic"] = nic
    if fabric_site.device:  # one device or rails: NCCL_IB_HCA="={hca}" matches exactly these
        values["hca"] = ",".join(fabric_site.devices)  # {hca_ports} follows (containers.fabrics.hca_ports)
    values.update(fabric_site.host_paths)
    values.update((key, str(value)) for key, value in fabric_site.settings)
    return values


def site_binds(site: Site) -> list[Bind]:
    binds = []
    for entry in site.binds:
        source, _, rest = entry.partition(":")
        target, _, options = rest.partition(":")
        binds.append(Bind(source, target or source, readonly=options == "ro"))
    return binds


# NCCL reads this file at its start (before NCCL_CONF_FILE and ~/.nccl.conf); a site puts the
# settings its nodes need there (interfaces, HCAs, a topology file). A container sees the image's
# /etc, so the host's file is bound, read-only, where the host has one.
NCCL_CONF = "/etc/nccl.conf"
# The site's NCCL topology file (its [env] NCCL_TOPO_FILE): the site file is the site's own trusted
# input, so its path is bound into the container; an experiment's or an archive's path stays
# refused (launch.foreign_env: a variable that reads a file it names)
NCCL_TOPO_FILE = "NCCL_TOPO_FILE"


def nccl_host_files(spec: RunSpec, site: Site, root: Path = Path("/")) -> tuple[list[Bind], list[str]]:
    """The host files an NCCL run reads from the site, bound read-only at their own paths: the
    host's /etc/nccl.conf where present, and the site's NCCL_TOPO_FILE (not under charliecloud,
    which binds only onto paths the image already has). A topology file absent here
    is reported missing (preflight refuses) only where the ranks run on this host: a login node
    that starts Slurm steps may not hold the compute nodes' files (NCCL warns and goes on without)."""
    if not spec.uses_nccl or not RUNTIMES[spec.runtime].binds_any_target:
        # ch-run binds only onto paths the image has: a site file's path would stop the run
        return [], []
    binds, missing = [], []
    if (root / NCCL_CONF.lstrip("/")).is_file():
        binds.append(Bind(NCCL_CONF, NCCL_CONF, readonly=True))
    topo = site.env.get(NCCL_TOPO_FILE)
    if topo:
        if not topo.startswith("/"):
            raise UsageError(
                f"{site.path or 'the site file'}: [env] NCCL_TOPO_FILE must be an absolute path, got {topo!r}"
            )
        if (root / topo.lstrip("/")).is_file():
            binds.append(Bind(topo, topo, readonly=True))
        elif launcher_of(spec).one_host:
            missing.append(f"{topo}: the site's NCCL topology file ([env] NCCL_TOPO_FILE)")
    return binds, missing


def coll_rules(fabric: FabricProfile | None, spec: RunSpec, site: Site) -> str | None:
    """The text of the run's Open MPI collective rules file, or None: the fabric has none, or
    the site's or the run's own environment steers coll/tuned."""
    if fabric is None or not fabric.ompi_coll_rules or ompi_rules.tuned_by_user({**site.env, **spec.extra_env}):
        return None
    return ompi_rules.render(fabric.ompi_coll_rules)


def resolve(spec: RunSpec, site: Site, kernel: str | None = None) -> Preset:
    """The preset for spec.fabric, then the site's own [env] over it (a site knows its nodes:
    its NCCL_IB_HCA or UCX_NET_DEVICES win over the profile's), and the site's binds. An
    emulated cluster's links (--launcher emulated, --fabric emu-eth-<rate> or none) are
    ethernet's, on the namespaces' own interface: that environment wins over the site's.
    `kernel`: the kernel release the fork-safety decision reads (default: this host's)."""
    nccl_binds, nccl_missing = nccl_host_files(spec, site)
    binds = site_binds(site) + nccl_binds
    emulated = launcher_of(spec).emulated or is_emulated(spec.fabric)
    if spec.fabric is None and not emulated:
        return Preset(None, dict(site.env), tuple(binds), tuple(nccl_missing))
    try:
        fabric = profile(spec.fabric) if spec.fabric else ETHERNET
    except ValueError as exc:
        raise UsageError(str(exc), fields=("fabric",)) from None
    rules = coll_rules(fabric, spec, site)
    if emulated:  # launch.fleet.emulate: the fabric name, if any, must be emu-eth-<rate> (emulated.plan_for)
        return Preset(
            spec.fabric,
            {**site.env, **emulated_fabric_env(spec)},
            tuple(binds),
            tuple(nccl_missing),
            profile=fabric,
            device_nodes=tuple(fabric.needed_device_nodes(spec.uses_nccl)),
            coll_rules=rules,
        )
    fabric_site = site.fabrics.get(str(spec.fabric))
    if fabric_site is None:
        where = site.path or "the default site (ethernet only)"
        raise UsageError(
            f"fabric {spec.fabric!r} is not present in {where}; add [fabrics.{spec.fabric}]", fields=("fabric",)
        )
    values = site_values(fabric, fabric_site)
    gpudirect = None if spec.gpudirect is None else spec.gpudirect == "on"
    if kernel is None:
        fork_safe, fork_record = fork_safety(fabric, kernel_release(), kernel_host())
    else:
        fork_safe, fork_record = fork_safety(fabric, kernel)
    try:
        env = {
            **fabric.environment(
                values,
                nccl=spec.uses_nccl,
                gpudirect=gpudirect,
                mpi_gpu=spec.hands_gpu_buffers_to_mpi,
                fork_safe=fork_safe,
            ),
            **site.env,
        }
        mounts = fabric.bind_mounts(values, gpudirect=gpudirect)
    except KeyError as exc:
        raise UsageError(
            f"{exc.args[0]} (set it under [fabrics.{spec.fabric}] in the site file)", fields=("fabric",)
        ) from None
    missing = list(nccl_missing)
    for mount in mounts:
        found = sorted(glob.glob(mount.host))
        if not found and mount.required:
            missing.append(f"{mount.host}: {mount.why}")
        for path in found:
            target = path if mount.target == mount.host else mount.target
            binds.append(Bind(path, target))
    return Preset(
        spec.fabric,
        env,
        tuple(binds),
        tuple(missing),
        fabric_site.link_gbit_s,
        fabric,
        tuple(fabric.needed_device_nodes(spec.uses_nccl)),
        rules,
        {"fork_safety": fork_record} if fork_record else {},
    )
