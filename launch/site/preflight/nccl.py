"""NCCL checks: the library in the image, its net plugin, the plugin's libfabric floor."""

from __future__ import annotations

from containers.fabrics import FabricProfile
from launch.site.preflight.checks import Check
from launch.site.preflight.facts import SideFacts, major_minor


def nccl_checks(spec, fabric: FabricProfile | None, image: SideFacts, env: dict[str, str]) -> list[Check]:
    """The image's NCCL and net plugin for the run (`fabric`: its profile, the preset's)."""
    if not spec.uses_nccl or not spec.containerised:
        return []
    libs = image.libs or {}
    found = "libnccl.so.2" in libs
    checks = [
        Check(
            "NCCL",
            "ok" if found else "fail",
            f"libnccl.so.2 at {libs['libnccl.so.2']}" if found else "no libnccl.so.2 in the image",
            fix="" if found else "a cuda-flavour image (or torch's nvidia-nccl wheel)",
        )
    ]
    plugin = [k for k in libs if k.startswith("libnccl-net")]
    if env.get("NCCL_NET") == "OFI":
        checks.append(
            Check(
                "NCCL net plugin",
                "ok" if plugin else "fail",
                f"{', '.join(plugin)} present" if plugin else "NCCL_NET=OFI but no libnccl-net*.so in the image",
                fix="" if plugin else "build aws-ofi-nccl into the image (cuda flavour)",
            )
        )
        floor = fabric.nccl_plugin_min_libfabric if fabric else None
        if fabric and floor and plugin:
            checks.append(plugin_libfabric_check(fabric, floor, image.libfabric))
    elif plugin and env.get("NCCL_NET") in ("IB", "Socket"):
        checks.append(
            Check(
                "NCCL net plugin",
                "ok",
                f"{', '.join(plugin)} present but NCCL_NET={env['NCCL_NET']} keeps NCCL on its own transport",
            )
        )
    return checks


def plugin_libfabric_check(fabric: FabricProfile, floor: tuple[int, int], version: str | None) -> Check:
    """The libfabric aws-ofi-nccl loads in the container against the fabric's floor
    (FabricProfile.nccl_plugin_min_libfabric): the image's own, or where the fabric binds the
    host's over it (Slingshot), the host's, which the image's `fi_info` then reports."""
    wanted, name = ".".join(map(str, floor)), fabric.name.upper()
    found = major_minor(version)
    old = found is not None and found < floor
    whose = "host libfabric (bound in)" if fabric.binds_host_libfabric else "image libfabric"
    if not old:
        fix = ""
    elif fabric.binds_host_libfabric:
        fix = f"bind a host libfabric >= {wanted} (host_libfabric under [fabrics.{fabric.name}] in the site file)"
    else:
        fix = f"rebuild the image with libfabric >= {wanted}"
    return Check(
        f"libfabric for aws-ofi-nccl on {name}",
        "fail" if old else ("ok" if version else "unknown"),
        f"{whose} {version or 'unknown'} (aws-ofi-nccl needs >= {wanted} on {name})",
        fix=fix,
    )
