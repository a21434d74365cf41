"""What image builds take from this host, shared by the build driver (containers.build), the
local CUDA base (containers.cudabase) and the verified sources (containers.sources): the cache
directory, the configured Debian mirror, a debootstrap root, the container runtime's binary,
commands run into a build log, and the one-line BuildError they raise; and free TCP ports for
the services tools start on this host (a registry, an emulated Slurm cluster's daemons).
"""

from __future__ import annotations

import os
import re
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


class DiskFull(BuildError):
    """A build stopped because a disk filled: retrying it cannot help."""


def cache_dir() -> Path:
    root = os.environ.get("FABRIC_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fabric-bench"
    )
    return Path(root)


def runtime_binary(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise BuildError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    path = shutil.which(runtime)
    if not path:
        raise BuildError(
            f"container runtime {runtime!r} not found on PATH (CI/dev hosts: scripts/provision-apptainer.sh)"
        )
    return path


def run_logged(argv: list[str], log: Path, what: str, stamped: bool = False, **kwargs) -> None:
    """Run argv, appending its output to log (each line prefixed with the seconds since
    it started when `stamped`); a failure is one BuildError line with the cause its output
    names (DiskFull when the disk filled)."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        start = out.tell()
        try:
            if not stamped:
                code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, **kwargs).returncode
            else:
                started = time.monotonic()
                with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs) as proc:
                    assert proc.stdout is not None
                    for raw in proc.stdout:
                        out.write(f"[{time.monotonic() - started:8.1f}s] {raw.decode(errors='replace')}")
                        out.flush()
                code = proc.returncode
        except OSError as exc:
            raise BuildError(f"{what} failed ({exc}); log: {log}") from None
    if code == 0:
        return
    with log.open("rb") as written:
        written.seek(start)
        cause = failure_cause(written.read().decode(errors="replace"))
    free = {where: free_gib(where) for where in sorted({log.parent, Path(tempfile.gettempdir())})}
    with log.open("a") as out:  # a full disk is a common cause, and the log should say so
        for where, gib in free.items():
            out.write(f"free space after the failure: {gib:.1f} GiB under {where}\n")
    if cause == NO_SPACE:
        room = ", ".join(f"{gib:.1f} GiB free under {where}" for where, gib in free.items())
        raise DiskFull(f"{what} failed: the disk filled ({room} once it stopped); log: {log}")
    raise BuildError(f"{what} failed (exit {code}){': ' + cause if cause else ''}; log: {log}")


def free_gib(where: Path) -> float:
    """Free space on the file system holding `where`, in GiB (a build says it as it starts)."""
    return shutil.disk_usage(where).free / 2**30


NO_SPACE = "no space left on device"
# The lines a failing build tool names its cause in (apptainer FATAL, the self-test FAIL, pip/apt ERROR, make's
# "Error N", a compiler's "error:"): the last one is the one-line error's cause
_CAUSE = re.compile(r"\b(FATAL|FAIL|ERROR|E:|[Ee]rror:|Error \d+|error\b)")
_ENGINE_EXIT = re.compile(r"while running engine: exit status \d+$")
_STAMP = re.compile(r"^\[ *[0-9.]+s\] ")


def failure_cause(output: str) -> str:
    """What a failed command's output says went wrong: NO_SPACE when the disk filled anywhere in
    it (the later errors only follow from that), else its last error line, shortened."""
    if NO_SPACE in output.lower():
        return NO_SPACE
    lines = [_STAMP.sub("", line).strip() for line in output.splitlines()]
    found = [line for line in lines if _CAUSE.search(line)]
    # apptainer's closing "while running engine: exit status N" only repeats a %post failure
    named = [line for line in found if not _ENGINE_EXIT.search(line)] or found
    cause = named[-1] if named else ""
    return cause if len(cause) <= 240 else cause[:239] + "…"


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
    run_logged(["debootstrap", "--variant=minbase", suite, str(root), mirror], log, "debootstrap of the base image")
    for node in (root / "dev").iterdir():  # apptainer binds /dev itself
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
