"""RDMA checks: the host's kernel drivers against the image's rdma-core providers, and the
image's libibverbs opening the host's devices."""

from __future__ import annotations

import re
from pathlib import Path

from containers.fabrics import FabricProfile
from launch.site.preflight.checks import Check
from launch.site.preflight.facts import SideFacts

# kernel driver -> the rdma-core provider library that serves it
PROVIDER_OF_DRIVER = {
    "mlx5_core": "libmlx5",
    "mlx4_core": "libmlx4",
    "hfi1": "libhfi1verbs",
    "efa": "libefa",
    "irdma": "libirdma",
    "bnxt_en": "libbnxt_re",
    "qedr": "libqedr",
    "rdma_rxe": "librxe",
    "siw": "libsiw",
    "ib_qib": "libipathverbs",
    "mana": "libmana",
    "erdma": "liberdma",
    "hns3": "libhns",
    "cxgb4": "libcxgb4",
    "vmw_pvrdma": "libvmw_pvrdma",
}


# fabrics whose traffic goes through rdma-core's verbs providers on the host's RDMA devices
def provider_checks(fabric: FabricProfile | None, image: SideFacts, drivers: dict[str, str]) -> list[Check]:
    """The host's RDMA kernel drivers meet the image's rdma-core providers (`fabric`: the run's)."""
    if fabric is None or not fabric.verbs:
        return []
    if not drivers:
        return [
            Check(
                "rdma-core provider",
                "unknown" if fabric.control else "fail",
                "no RDMA device in /sys/class/infiniband on this host",
                fix="" if fabric.control else "load the NIC's driver (or run on a node that has one)",
            )
        ]
    if image.providers is None or not image.reachable:
        return [Check("rdma-core provider", "unknown", "the image's providers could not be listed")]
    checks = []
    for driver in sorted(set(drivers.values())):
        wanted = PROVIDER_OF_DRIVER.get(driver)
        devices = ", ".join(d for d, v in drivers.items() if v == driver)
        if wanted is None:
            checks.append(Check(f"rdma-core provider for {driver}", "unknown", f"{devices}: no known provider"))
            continue
        found = [p for p in image.providers if p.startswith(wanted + "-rdmav")]
        if found:
            checks.append(
                Check(f"rdma-core provider for {driver}", "ok", f"{devices}: image has {found[0]}", image=found[0])
            )
        else:
            checks.append(
                Check(
                    f"rdma-core provider for {driver}",
                    "fail",
                    f"{devices}: the image has no {wanted} provider "
                    f"({', '.join(image.providers) or 'no providers'}); verbs will see no device",
                    fix=f"install {wanted} (rdma-core / ibverbs-providers) in the image",
                )
            )
    if "hfi1" in drivers.values() and fabric.psm2:
        ok = "libpsm2.so.2" in (image.libs or {})
        checks.append(
            Check(
                "libpsm2 for hfi1",
                "ok" if ok else "fail",
                "image has libpsm2.so.2" if ok else "the image has no libpsm2.so.2",
                fix="" if ok else "build the image with libpsm2",
            )
        )
    return checks


# libibverbs' own words when a provider cannot drive a device (rdma-core's verbs/init.c)
_KERNEL_ABI = re.compile(
    r"Driver (\S+) does not support the kernel ABI of (\d+) \(supports (\d+) to (\d+)\) "
    r"for device (\S+)"
)
_NO_PROVIDER = re.compile(r"no userspace device-specific driver found for (\S+)")
_HCAS = re.compile(r"^(\d+) HCAs? found")


def verbs_checks(fabric: FabricProfile | None, image: SideFacts, drivers: dict[str, str]) -> list[Check]:
    """The image's libibverbs opening the host's devices (`ibv_devinfo -l` inside the
    container): a provider built for another kernel ABI than the host driver speaks, or no
    provider for a device, leaves verbs with no device (k8snetworkplumbingwg/sriov-cni#348,
    ofiwg/libfabric#975); the provider files being present does not show it."""
    if not (fabric and fabric.verbs) or not drivers or not image.reachable:
        return []
    if image.verbs is None:
        return [
            Check(
                "verbs in the image",
                "unknown",
                "ibv_devinfo is not in the image: its libibverbs was not tried on the host's devices",
            )
        ]
    lines = image.verbs
    mismatched: dict[str, set] = {}
    for m in filter(None, map(_KERNEL_ABI.search, lines)):
        mismatched.setdefault(
            f"{m.group(1)} provider supports kernel ABI {m.group(3)} to {m.group(4)}, "
            f"the host's driver speaks {m.group(2)}",
            set(),
        ).add(Path(m.group(5)).name)
    checks = [
        Check(
            "verbs kernel ABI",
            "fail",
            f"the image's {what} ({', '.join(sorted(devices))})",
            fix="run an image whose rdma-core matches the host's kernel driver (rebuild it with the "
            "host's rdma-core version), or update the host's driver",
        )
        for what, devices in sorted(mismatched.items())
    ]
    orphans = sorted({Path(m.group(1)).name for m in filter(None, map(_NO_PROVIDER.search, lines))})
    if orphans:
        checks.append(
            Check(
                "verbs provider",
                "fail",
                f"the image's libibverbs has no provider for {', '.join(orphans)}",
                fix="install the NIC's rdma-core provider in the image",
            )
        )
    header = next((i for i, line in enumerate(lines) if _HCAS.match(line)), None)
    count = _HCAS.match(lines[header]) if header is not None else None
    found = int(count.group(1)) if count else 0
    if header is not None and found and not checks:
        names = lines[header + 1 : header + 1 + found]  # ibv_devinfo -l: one name per line after the count
        checks.append(
            Check(
                "verbs in the image",
                "ok",
                f"the image's libibverbs opened {found} device{'s' if found != 1 else ''}: {', '.join(names)}",
            )
        )
    elif not found:
        checks.append(
            Check(
                "verbs in the image",
                "fail",
                f"the image's libibverbs sees no device ({'; '.join(lines[-1:])})",
                fix="bind /dev/infiniband and /sys/class/infiniband into the container, and check the messages above",
            )
        )
    return checks
