"""The NVIDIA driver against the CUDA the run's image was built with (issue 42, item 5).

A CUDA major version runs only on a driver of its branch or newer (CUDA's minor-version
compatibility): CUDA 13 needs R580, 12 needs R525, 11 needs R450. Below the floor the image's
CUDA cannot initialise, and a torch rank would see no GPU; preflight refuses first, in one line
naming the driver found and the one needed. CUDA's forward-compatibility libraries
(cuda-compat) lift the floor only on data-centre GPUs and selected driver branches, and the
images do not ship them: the fix named is a driver update.

The driver comes from `nvidia-smi --query-gpu=driver_version --format=csv,noheader` (one
version per GPU); the parser also reads the banner of plain `nvidia-smi` ("Driver Version:",
from R610 "KMD Version:") and `nvidia-smi -q` ("Driver Version : ..."), as sites paste them.

Read where the run is launched, the driver is that host's: on a login node without GPUs,
"unknown", never "fail". A Slurm run's nodes are read by its per-node samplers
(launch.disturbance.nodes), which keep each node's /proc/driver/nvidia/version (the kernel
module's own line, no nvidia-smi needed); `on_nodes` then judges every node that ran ranks
against the floor and puts those checks in the result's preflight record in place of the
launching host's (tests/data/nvidia_driver: recorded real files).
"""

from __future__ import annotations

import re
from dataclasses import asdict

from launch.site.preflight.checks import Check, worst

DRIVER_FLOOR = {11: 450, 12: 525, 13: 580}  # CUDA major -> the driver branch it needs
_LABELLED = re.compile(r"(?:Driver|KMD) Version\s*:\s*(\d+\.\d+(?:\.\d+)?)")
_BARE = re.compile(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$")
# /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01 ..."
# (the open modules) or "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02 ..." (proprietary)
_KERNEL_MODULE = re.compile(
    r"NVRM version: NVIDIA UNIX (?:Open Kernel Module for \S+|\S+ Kernel Module)\s+(\d+\.\d+(?:\.\d+)?)"
)


def driver_version(text: str) -> str | None:
    """The driver version nvidia-smi printed (the lowest, where GPUs disagree); None if none."""
    found = [
        m.group(1)
        for line in text.splitlines()
        if (m := _LABELLED.search(line) or _KERNEL_MODULE.search(line) or _BARE.match(line))
    ]
    return min(found, key=lambda v: tuple(int(p) for p in v.split("."))) if found else None


def floor_for(cuda: str | None) -> int | None:
    """The driver branch CUDA `cuda` ("13.0.2") needs; None where unknown."""
    major = re.match(r"(\d+)\.", cuda or "")
    return DRIVER_FLOOR.get(int(major.group(1))) if major else None


def driver_check(driver: str | None, cuda: str | None) -> Check:
    """ok | fail (below the floor) | unknown (no driver read, or the run's CUDA not known)."""
    if driver is None:
        return Check("NVIDIA driver", "unknown", "nvidia-smi not available on this host")
    needed = floor_for(cuda)
    if needed is None:
        return Check(
            "NVIDIA driver", "ok", f"driver {driver} (the run's CUDA is not known here: no floor checked)", host=driver
        )
    branch = int(driver.split(".")[0])
    if branch < needed:
        return Check(
            "NVIDIA driver",
            "fail",
            f"driver {driver} found, R{needed} or newer needed for the image's CUDA {cuda}",
            fix=f"update the node's driver to R{needed}+, or use an image built for an older CUDA",
            host=driver,
            image=cuda,
        )
    return Check("NVIDIA driver", "ok", f"driver {driver} (R{needed}+ needed for CUDA {cuda})", host=driver, image=cuda)


DRIVER_CHECK = "NVIDIA driver"


def on_nodes(record: dict | None, node_files: dict[str, dict], cuda: str | None) -> dict | None:
    """The result's preflight record with the driver judged on the nodes that ran the ranks: one
    check per node whose sampler kept its /proc/driver/nvidia/version (`driver_version_file`), in
    place of the launching host's check, and the record's verdict again. Unchanged where no node
    file holds one (no Slurm, no GPUs, an older sampler)."""
    read = {
        host: driver_version(data["driver_version_file"])
        for host, data in sorted(node_files.items())
        if isinstance(data.get("driver_version_file"), str)
    }
    if not read or record is None:
        return record
    checks = [c for c in record.get("checks") or [] if not str(c.get("check", "")).startswith(DRIVER_CHECK)]
    for host, version in read.items():
        found = driver_check(version, cuda)
        found.check = f"{DRIVER_CHECK} on {host}"
        if version is None:
            found.detail = "its /proc/driver/nvidia/version names no driver version"
        checks.append(asdict(found))
    verdict = worst([Check(**c) for c in checks])
    return {**record, "checks": checks, "verdict": verdict, "driver_read_on": sorted(read)}
