"""What image builds take from this host, shared by the build driver (containers.build), the
local CUDA base (containers.cudabase) and the verified sources (containers.sources): the cache
directory, the configured Debian mirror, a debootstrap root, the container runtime's binary,
commands run into a build log, and the one-line BuildError they raise; and free TCP ports for
the services tools start on this host (a registry, an emulated Slurm cluster's daemons).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

Progress = Callable[[str], None]
RUNTIMES = ("apptainer", "podman")


class BuildError(Exception):
    """One line: the cause and the log path (the CLI turns it into exit 2)."""


def cache_dir() -> Path:
    root = os.environ.get("FABRIC_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fabric-bench")
    return Path(root)


def runtime_binary(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise BuildError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    path = shutil.which(runtime)
    if not path:
        raise BuildError(f"container runtime {runtime!r} not found on PATH "
                         f"(CI/dev hosts: scripts/provision-apptainer.sh)")
    return path


def run_logged(argv: list[str], log: Path, what: str, stamped: bool = False, **kwargs) -> None:
    """Run argv, appending its output to log (each line prefixed with the seconds since
    it started when `stamped`); a failure is one BuildError line."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        try:
            if not stamped:
                code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, **kwargs).returncode
            else:
                started = time.monotonic()
                with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      **kwargs) as proc:
                    assert proc.stdout is not None
                    for raw in proc.stdout:
                        out.write(f"[{time.monotonic() - started:8.1f}s] "
                                  f"{raw.decode(errors='replace')}")
                        out.flush()
                code = proc.returncode
        except OSError as exc:
            raise BuildError(f"{what} failed ({exc}); log: {log}") from None
    if code != 0:
        with log.open("a") as out:  # a full disk is a common cause, and the log should say so
            for where in sorted({log.parent, Path(tempfile.gettempdir())}):
                out.write(f"free space after the failure: {shutil.disk_usage(where).free / 2**30:.1f} GiB "
                          f"under {where}\n")
        raise BuildError(f"{what} failed (exit {code}); log: {log}")


def debian_mirror() -> str:
    """The Debian mirror this host is configured with (never hard-coded)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            if line.startswith("deb "):
                return line.split()[1]
    raise BuildError("no Debian mirror configured in /etc/apt (needed for the cpu base image)")


def debootstrap_root(root: Path, log: Path, suite: str, progress: Progress = print) -> None:
    """A minbase Debian root of `suite` from the configured mirror, ready to pack."""
    mirror = debian_mirror()
    if not shutil.which("debootstrap"):
        raise BuildError("base image missing and debootstrap not installed (apt-get install debootstrap)")
    progress(f"base image: debootstrap {suite} minbase from {mirror} (~1 min)")
    run_logged(["debootstrap", "--variant=minbase", suite, str(root), mirror],
                log, "debootstrap of the base image")
    for node in (root / "dev").iterdir():     # apptainer binds /dev itself
        subprocess.run(["rm", "-rf", str(node)], check=True)
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports free on `host` now (each socket held until all are bound)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
