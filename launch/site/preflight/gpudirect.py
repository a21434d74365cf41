"""GPUDirect RDMA's kernel side: a run asking for it (--gpudirect on) needs one of the two routes
by which an RDMA NIC reaches GPU memory, on the node that runs the ranks (issue 49, item 6).

- nvidia_peermem (nv_peer_mem before R470): the peer-memory client module. Loaded, it is a folder
  in /sys/module (/sys/module/nvidia_peermem, /sys/module/nv_peer_mem).
- DMA-BUF: the GPU driver exports GPU memory as a dma-buf and the RDMA core imports it
  (ib_umem_dmabuf, Linux 5.12). NCCL takes it where the kernel is 5.12 or newer and CUDA reports
  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (its "DMA-BUF is available on GPU device N"). launch never
  loads CUDA, so what decides that attribute is read from files instead: the running kernel's
  release (/proc/sys/kernel/osrelease) and which NVIDIA kernel module is loaded. Only the open GPU
  kernel modules export dma-bufs (from R515, CUDA 11.7); the module names itself on the first line
  of /proc/driver/nvidia/version: "NVIDIA UNIX Open Kernel Module for <arch>  <version>" (open) or
  "NVIDIA UNIX <arch> Kernel Module  <version>" (proprietary). Recorded real files:
  tests/data/nvidia_driver.

Neither route: NCCL falls back to staging through host memory (no GDRDMA on its NET channels) and
UCX fails to start with its GPU transport asked for, so a run that asks for GPUDirect is refused in
one line. A host without /proc/driver/nvidia/version carries no NVIDIA driver (a login node, say):
nothing is known there and nothing is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from launch.site.fabric_preset import kernel_version

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
DMABUF_KERNEL = (5, 12)  # ib_umem_dmabuf: the RDMA core imports dma-bufs from this release on
DMABUF_DRIVER = 515  # the first open GPU kernel modules, and CUDA 11.7's DMA-BUF support
_MODULE_LINE = re.compile(r"NVRM version: NVIDIA UNIX (Open )?(?:Kernel Module for \S+|\S+ Kernel Module)\s+(\d+)\.")


def nvidia_module(text: str) -> tuple[bool, int] | None:
    """(open module?, driver branch) from /proc/driver/nvidia/version's text; None if unreadable."""
    found = _MODULE_LINE.search(text)
    return (bool(found.group(1)), int(found.group(2))) if found else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def routes(root: Path = Path("/")) -> dict:
    """What this host offers GPUDirect RDMA: {"driver": bool, "peermem": name | None, "dmabuf": bool,
    "why": ...}, read from sysfs and procfs under `root`."""
    version = _read(root / "proc/driver/nvidia/version")
    peermem = next((m for m in PEERMEM_MODULES if (root / "sys/module" / m).is_dir()), None)
    module = nvidia_module(version or "")
    kernel = kernel_version(_read(root / "proc/sys/kernel/osrelease") or "")
    reasons = []
    if module is None:
        reasons.append("no NVIDIA kernel module named in /proc/driver/nvidia/version")
    elif not module[0]:
        reasons.append(f"the proprietary NVIDIA kernel module (R{module[1]}) exports no DMA-BUF")
    elif module[1] < DMABUF_DRIVER:
        reasons.append(f"open kernel module R{module[1]}: DMA-BUF from R{DMABUF_DRIVER}")
    if kernel is None:
        reasons.append("kernel release unreadable")
    elif kernel < DMABUF_KERNEL:
        reasons.append(f"kernel {kernel[0]}.{kernel[1]} imports no DMA-BUF into RDMA (5.12+)")
    return {
        "driver": version is not None,
        "peermem": peermem,
        "dmabuf": not reasons,
        "why": "; ".join(reasons) or "open kernel module and kernel 5.12+",
    }


def refusal(gpudirect: str | None, gpus_per_node: int, root: Path = Path("/")) -> str | None:
    """Why a run asking for GPUDirect RDMA cannot have it on this host (one line), or None: not
    asked, no GPUs, a route present, or no NVIDIA driver here to judge by."""
    if gpudirect != "on" or gpus_per_node <= 0:
        return None
    found = routes(root)
    if not found["driver"] or found["peermem"] or found["dmabuf"]:
        return None
    return (
        "--gpudirect on: this node has neither nvidia_peermem (no /sys/module/nvidia_peermem) nor DMA-BUF "
        f"({found['why']}); modprobe nvidia-peermem, or use the open GPU kernel modules on Linux 5.12+, "
        "or run with --gpudirect off"
    )
