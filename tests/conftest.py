"""Shared test helpers.

`need(ok, why)` skips a test when a component is missing on a user's machine;
under CI (CI=true) a missing component is a failure, because CI installs all.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Runs index their results (launch.results.store): keep tests out of the user's history,
# in a folder of this session's own that goes with it.
if "FABRIC_BENCH_STORE" not in os.environ:
    _STORE_DIR = tempfile.mkdtemp(prefix="fabric-bench-store-")
    atexit.register(shutil.rmtree, _STORE_DIR, True)
    os.environ["FABRIC_BENCH_STORE"] = str(Path(_STORE_DIR) / "results.sqlite")
VENV_BIN = Path(sys.executable).parent
UNDER_CI = os.environ.get("CI", "").lower() == "true"


def need(ok: bool, why: str) -> None:
    if ok:
        return
    if UNDER_CI:
        pytest.fail(f"CI must provide this: {why}")
    pytest.skip(why)


def alive(pids) -> set[int]:
    """The pids among `pids` still running (a zombie has ended: only its parent's wait is left)."""
    import psutil

    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return {pid for pid in pids if running(pid)}


def fabric_bench(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed `fabric-bench` command for real."""
    return subprocess.run(
        [str(VENV_BIN / "fabric-bench"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=kwargs.pop("cwd", REPO),
        **kwargs,
    )


# The image flavour the tests build and run (.ci/run builds the same): Debian's packaged
# communication stack, minutes cold. The cpu flavour's source-built site stack takes ~35 min
# on 2 cores, beyond CI's budget beside the tests; its podman rehearsal records prove it.
IMAGE_FLAVOUR = "cpu-debian"


@pytest.fixture(scope="session")
def cpu_ethernet_image():
    """containers.build.ImageRecord of the IMAGE_FLAVOUR/ethernet Apptainer image (a .sif),
    built once per session (builds are cached by their inputs in the fabric-bench cache dir)."""
    from containers import build

    need(shutil.which("apptainer") is not None, "apptainer not installed (CI: scripts/provision-apptainer.sh)")
    need(shutil.which("debootstrap") is not None, "debootstrap not installed (the cpu base image)")
    try:
        return build.build("ethernet", IMAGE_FLAVOUR, "apptainer", progress=lambda line: None)
    except build.BuildError as exc:
        pytest.fail(f"building the {IMAGE_FLAVOUR} ethernet image: {exc}")


def pytest_collection_modifyitems(config, items):
    """Markers from what a test uses, so a subset can be chosen (`-m "not image"`, `-m slurm`):
    integration by its folder, image by the image fixture, slurm by the Slurm cluster module,
    root by what needs it (namespaces, daemons, image builds: a test that asks for euid 0)."""
    import inspect

    for item in items:
        path = Path(str(item.fspath))
        if "integration" in path.parts:
            item.add_marker(pytest.mark.integration)
        if "cpu_ethernet_image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.image)
        if path.name in ("test_slurm.py", "test_emulated_slurm.py") and "integration" in path.parts:
            item.add_marker(pytest.mark.slurm)
        function = getattr(item, "function", None)
        try:
            asks_root = function is not None and "geteuid() == 0" in inspect.getsource(function)
        except (OSError, TypeError):
            asks_root = False
        if asks_root or any(item.get_closest_marker(m) for m in ("slurm", "image")):
            item.add_marker(pytest.mark.root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed image build names its log, which CI's clean machine throws away: the log's
    last lines go into the failure report, so CI's output says why the build failed."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or call.excinfo.typename != "BuildError":
        return
    match = re.search(r"log: (.+)$", str(call.excinfo.value))
    log = Path(match.group(1)) if match else None
    if log and log.is_file():
        tail = log.read_text(errors="replace").splitlines()[-60:]
        report.sections.append(("build log, last 60 lines", "\n".join(tail)))
