"""GPUDirect RDMA's kernel routes (launch.site.preflight.gpudirect): nvidia_peermem loaded, or
DMA-BUF (the open GPU kernel modules on Linux 5.12+), read from the recorded real
/proc/driver/nvidia/version files in tests/data/nvidia_driver (SOURCE.md there); a run asking for
GPUDirect where neither exists is refused in one line (issue 49, item 6)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launch.site.preflight import gpudirect

RECORDED = Path(__file__).resolve().parents[1] / "data" / "nvidia_driver"


def node(root: Path, driver: str | None, kernel: str, peermem: str | None = None) -> Path:
    """A node's /proc and /sys under `root`: the recorded driver file (None: no NVIDIA driver),
    the kernel release, and a loaded peer-memory module by name."""
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(kernel + "\n")
    if driver:
        (root / "proc/driver/nvidia").mkdir(parents=True)
        shutil.copy(RECORDED / driver / "version", root / "proc/driver/nvidia/version")
    if peermem:
        (root / "sys/module" / peermem).mkdir(parents=True)
    return root


def test_recorded_version_files_name_their_module():
    assert gpudirect.nvidia_module((RECORDED / "open-565" / "version").read_text()) == (True, 565)
    assert gpudirect.nvidia_module((RECORDED / "proprietary-580" / "version").read_text()) == (False, 580)
    assert gpudirect.nvidia_module("") is None


@pytest.mark.parametrize(
    "driver, kernel, peermem, refused",
    [
        ("proprietary-580", "6.8.0-45-generic", None, True),  # no peermem, no DMA-BUF export
        ("proprietary-580", "6.8.0-45-generic", "nvidia_peermem", False),
        ("proprietary-580", "5.4.0-200-generic", "nv_peer_mem", False),  # the pre-R470 module name
        ("open-565", "6.8.0-45-generic", None, False),  # DMA-BUF
        ("open-565", "5.4.0-200-generic", None, True),  # open module, but a kernel before 5.12
        (None, "6.8.0-45-generic", None, False),  # no NVIDIA driver here (a login node): not judged
    ],
)
def test_gpudirect_on_is_refused_only_where_neither_route_exists(tmp_path, driver, kernel, peermem, refused):
    root = node(tmp_path, driver, kernel, peermem)
    why = gpudirect.refusal("on", 8, root)
    assert (why is not None) is refused
    if refused:
        assert "\n" not in why and "nvidia_peermem" in why and "DMA-BUF" in why
    assert gpudirect.refusal("off", 8, root) is None and gpudirect.refusal(None, 8, root) is None


def test_the_refusal_names_what_is_missing(tmp_path):
    proprietary = gpudirect.refusal("on", 4, node(tmp_path / "a", "proprietary-580", "6.8.0"))
    assert "proprietary NVIDIA kernel module (R580)" in proprietary
    old_kernel = gpudirect.refusal("on", 4, node(tmp_path / "b", "open-565", "5.4.0"))
    assert "kernel 5.4" in old_kernel and "proprietary" not in old_kernel
