"""Site configuration: one TOML file per cluster, validated on load into typed objects.

    runtime  = "apptainer"            # apptainer | singularity | podman | charliecloud | host
    launcher = "srun"                 # local | mpirun | srun | sbatch
    modules  = ["openmpi/4.1.6"]      # `module load`ed by job scripts (sbatch, one-job sweeps)
    binds    = ["/scratch", "/opt/cray:/opt/cray:ro"]   # SRC[:DST[:OPTS]], SRC absolute

    [scheduler]                       # defaults for srun / sbatch
    partition  = "gpu"
    account    = "proj42"
    time_limit = "01:30:00"           # [D-]HH:MM:SS, or whole minutes (90)

    [env]                             # extra environment for every rank
    NCCL_DEBUG = "WARN"

    [fabrics.ethernet]                # one table per fabric present; keys per fabric:
    interface = "eth0"                #   ethernet: interface
    [fabrics.infiniband]              #   infiniband, omnipath: hca, interface
    hca = "mlx5_0"                    #   efa, slingshot: device, interface
    interface = "ib0"                 # every fabric may add link_gbit_s = 200 (the line rate per NIC,
                                      #   for the plausibility verdict; default: probed), and a
                                      #   profile's own keys (containers.fabrics.SiteKey), each checked
                                      #   against what it declares
    # a multi-rail node lists its devices: hca = "mlx5_0,mlx5_1,mlx5_2,mlx5_3"

    [registry]                        # where this site's images come from (`image push/pull`)
    url = "registry.example.org/hpc/fabric-bench"   # HOST[:PORT]/PREFIX; logins: the runtime's own
    references = "/shared/fabric-bench/images.json" # signed image references (image push --reference-file)
    allowed_signers = "/shared/fabric-bench/allowed_signers"   # who may sign them
    insecure = false                  # plain HTTP: only for a registry on this host

Every error is a UsageError naming the file, the key and what was expected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from containers.fabrics import HOST_FABRICS, profile
from launch import shapes, trust
from launch.shapes import ModuleName, SlurmName, SlurmTime
from launch.ranks.launchers import LOCAL, MPIRUN, SITE_LAUNCHERS, SRUN
from launch.fleet.node_names import INTERFACE_NAME
from launch.ranks.runtimes import CONTAINER_RUNTIMES, HOST
from launch.toml_file import TomlTable, read_toml


@dataclass(frozen=True)
class Scheduler:
    partition: Optional[SlurmName] = None
    account: Optional[SlurmName] = None
    time_limit_min: Optional[int] = None

    def slurm_time(self) -> Optional[SlurmTime]:
        """The limit as Slurm's D-HH:MM:SS (None when unset)."""
        return None if self.time_limit_min is None else shapes.slurm_time("time_limit", self.time_limit_min)


@dataclass(frozen=True)
class FabricSite:
    interface: Optional[str] = None  # IP interface (NCCL_SOCKET_IFNAME, btl_tcp_if_include, ...)
    device: Optional[str] = None  # hca (mlx5_0, hfi1_0), efa_0, cxi0
    host_paths: tuple[tuple[str, str], ...] = ()  # e.g. (("host_libfabric", "/opt/cray/libfabric/1.20/lib64"),)
    link_gbit_s: Optional[float] = None  # line rate per NIC (launch.results.plausibility); None: probed
    settings: tuple[tuple[str, int | str], ...] = ()  # the profile's own keys (FabricProfile.site_keys)

    @property
    def devices(self) -> tuple[str, ...]:
        """The device list (rails): "mlx5_0,mlx5_1" -> ("mlx5_0", "mlx5_1")."""
        return tuple(d.strip() for d in (self.device or "").split(",") if d.strip())


@dataclass(frozen=True)
class RegistrySite:
    url: str  # HOST[:PORT]/PREFIX
    references: Optional[Path] = None  # a signed image reference file
    allowed_signers: Optional[Path] = None
    insecure: bool = False


@dataclass(frozen=True)
class Site:
    runtime: str = HOST
    launcher: str = LOCAL.name
    modules: tuple[ModuleName, ...] = ()
    binds: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    scheduler: Scheduler = Scheduler()
    fabrics: dict[str, FabricSite] = field(default_factory=lambda: {"ethernet": FabricSite()})
    registry: Optional[RegistrySite] = None
    path: Optional[Path] = field(default=None, compare=False)

    @classmethod
    def default(cls) -> "Site":
        """No site file: run on this host, no container, ethernet only."""
        return cls()


def _fabrics(path: Path, table: dict) -> dict[str, FabricSite]:
    top = TomlTable(path, table, "fabrics")
    top.reject_unknown(HOST_FABRICS)
    fabrics = {}
    for name, body in table.items():
        if not isinstance(body, dict):
            raise top.fail(name, "a table such as [fabrics." + name + "]", body)
        check = TomlTable(path, body, f"fabrics.{name}")
        fabric = profile(name)
        device_key, path_keys = fabric.site_device_key, fabric.site_path_keys
        check.reject_unknown(
            ("interface",)
            + ((device_key,) if device_key else ())
            + path_keys
            + tuple(key.name for key in fabric.site_keys)
            + ("link_gbit_s",)
        )
        host_paths = tuple((key, str(check.string(key, pattern=r"/.*"))) for key in path_keys if key in body)
        for key in fabric.site_keys:  # each as its profile declares it
            if key.name in body and not key.accepts(body[key.name]):
                raise check.fail(key.name, key.expected, body[key.name])
        link = body.get("link_gbit_s")
        if link is not None and (isinstance(link, bool) or not isinstance(link, (int, float)) or link <= 0):
            raise check.fail("link_gbit_s", "a line rate in Gbit/s > 0", link)
        # one device, or a comma-separated list of rails (mlx5_0,mlx5_1)
        fabrics[name] = FabricSite(
            interface=check.string("interface", pattern=INTERFACE_NAME.pattern),
            device=check.string(device_key, pattern=r"[\w.:-]+(,[\w.:-]+)*") if device_key else None,
            host_paths=host_paths,
            link_gbit_s=float(link) if link is not None else None,
            settings=tuple((key.name, body[key.name]) for key in fabric.site_keys if key.name in body),
        )
    return fabrics


def _registry(path: Path, table: dict) -> RegistrySite:
    check = TomlTable(path, table, "registry")
    check.reject_unknown(("url", "references", "allowed_signers", "insecure"))
    url = check.string("url", pattern=r"[A-Za-z0-9.\[\]:-]+(/[a-z0-9._/-]+)?")
    if not url:
        raise check.fail("url", "HOST[:PORT]/PREFIX of an OCI registry")
    insecure = table.get("insecure", False)
    if not isinstance(insecure, bool):
        raise check.fail("insecure", "true or false", insecure)
    host = url.split("/", 1)[0].rsplit(":", 1)[0]
    if insecure and host not in ("localhost", "127.0.0.1", "[::1]"):
        raise check.fail("insecure", "false for a registry on another host (plain HTTP only on this host)", insecure)
    paths = {
        key: Path(str(check.string(key, pattern=r"/.*"))) if key in table else None
        for key in ("references", "allowed_signers")
    }
    return RegistrySite(url=url, insecure=insecure, **paths)


def site_from_dict(data: dict, path: Path) -> Site:
    top = TomlTable(path, data)
    top.reject_unknown(("runtime", "launcher", "modules", "binds", "env", "scheduler", "fabrics", "registry"))
    binds = top.strings("binds")
    for bind in binds:
        if not bind.startswith("/") or bind.count(":") > 2:
            raise top.fail("binds", "entries SRC[:DST[:OPTS]] with an absolute SRC", bind)
    env = top.subtable("env")
    env_check = TomlTable(path, env, "env")
    for name, value in env.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise env_check.fail(name, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if not isinstance(value, str):
            raise env_check.fail(name, "a string value", value)
    trust.check_env(env, f"{path.name}: [env]: ")  # the site's choice, of a shape every sink can take
    sched_table = top.subtable("scheduler")
    sched = TomlTable(path, sched_table, "scheduler")
    sched.reject_unknown(("partition", "account", "time_limit"))
    time_limit = sched.shaped("time_limit", shapes.time_minutes)
    modules = tuple(shapes.module_name(f"{path.name}: modules", m) for m in top.strings("modules"))
    fabrics = _fabrics(path, top.subtable("fabrics")) if "fabrics" in data else {"ethernet": FabricSite()}
    return Site(
        runtime=top.string("runtime", (*CONTAINER_RUNTIMES, HOST)) or HOST,
        launcher=top.string("launcher", SITE_LAUNCHERS) or LOCAL.name,
        modules=modules,
        binds=binds,
        env=dict(env),
        scheduler=Scheduler(
            partition=sched.shaped("partition", shapes.slurm_name),
            account=sched.shaped("account", shapes.slurm_name),
            time_limit_min=time_limit,
        ),
        fabrics=fabrics,
        registry=_registry(path, top.subtable("registry")) if "registry" in data else None,
        path=path,
    )


def load_site(path: Path | str) -> Site:
    """Read and validate a site file; every problem is one UsageError line."""
    path = Path(path)
    data = read_toml(path, "site")
    return site_from_dict(data, path)


# ---------------------------------------------------------------- writing


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def site_to_toml(site: Site, header: str = "") -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [
        f"runtime = {_toml(site.runtime)}",
        f"launcher = {_toml(site.launcher)}",
        f"modules = {_toml(site.modules)}",
        f"binds = {_toml(site.binds)}",
        "",
        "[scheduler]",
    ]
    sched = site.scheduler
    for key, value in (("partition", sched.partition), ("account", sched.account), ("time_limit", sched.slurm_time())):
        lines.append(f"{key} = {_toml(value)}" if value is not None else f'# {key} = "..."')
    lines += ["", "[env]"] + [f"{k} = {_toml(v)}" for k, v in site.env.items()]
    for name, fabric in site.fabrics.items():
        lines += ["", f"[fabrics.{name}]"]
        if fabric.interface:
            lines.append(f"interface = {_toml(fabric.interface)}")
        if fabric.device and profile(name).site_device_key:
            lines.append(f"{profile(name).site_device_key} = {_toml(fabric.device)}")
        lines += [f"{key} = {_toml(setting)}" for key, setting in (*fabric.host_paths, *fabric.settings)]
        if fabric.link_gbit_s:
            lines.append(f"link_gbit_s = {fabric.link_gbit_s:g}")
    if site.registry:
        lines += ["", "[registry]", f"url = {_toml(site.registry.url)}"]
        for key in ("references", "allowed_signers"):
            if getattr(site.registry, key):
                lines.append(f"{key} = {_toml(str(getattr(site.registry, key)))}")
        lines.append(f"insecure = {str(site.registry.insecure).lower()}")
    return "\n".join(lines) + "\n"


def site_from_probe(facts) -> Site:
    """A starting site from host facts (launch.site.probe.HostFacts): what is present here."""
    from launch.site.probe import active_ports, verdicts

    runtime = next((r for r in CONTAINER_RUNTIMES if facts.runtimes.get(r)), HOST)
    launcher = SRUN.name if "pmix" in facts.slurm_mpi_plugins else MPIRUN.name if facts.mpi.version else LOCAL.name
    up = [n.name for n in facts.nics if n.name != "lo" and n.operstate == "up"]
    usable = {name for name, v in verdicts(facts).items() if v.usable}
    fabrics: dict[str, FabricSite] = {}
    for name in (n for n in HOST_FABRICS if n in usable):  # each as its profile detects it
        detect = profile(name).detect
        if detect.kind == "interface":
            fabrics[name] = FabricSite(interface=up[0] if up else None)
        elif detect.kind == "rdma-port" and (ports := active_ports(facts, profile(name))):
            fabrics[name] = FabricSite(device=ports[0].device)
        elif detect.kind == "libfabric-provider" and (endpoints := facts.provider_endpoints.get(detect.provider or "")):
            domain = (endpoints[0].domain or "").removesuffix("-rdm").removesuffix("-dgrm")
            fabrics[name] = FabricSite(device=domain or None)
    return Site(runtime=runtime, launcher=launcher, fabrics=fabrics or {"ethernet": FabricSite()})
