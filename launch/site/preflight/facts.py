"""What each side has, gathered for the checks: the image's side by one shell inside the
container (IMAGE_SCRIPT, parsed by parse_side), the host's by the same tools and /sys, /dev."""

from __future__ import annotations

import os
import shutil
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# ---------------------------------------------------------------- facts

# The image's side, printed by one shell inside the container. Sections start
# with "== name"; device lines are "dev PATH STATE MODE" (STATE ok|missing|denied).
IMAGE_SCRIPT = r"""
echo "== fi_info"; fi_info --version 2>/dev/null
echo "== ucx_info"; ucx_info -v 2>/dev/null
echo "== ompi_info"; ompi_info --version 2>/dev/null
echo "== pmix"; python3 -c 'import ctypes; f = ctypes.CDLL("libpmix.so.2").PMIx_Get_version; f.restype = ctypes.c_char_p; print(f().decode())' 2>/dev/null
echo "== libs"
for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib \
         /usr/local/*/lib /usr/local/*/lib64 /opt/*/lib /opt/*/lib64 /opt/host/*; do
  [ -d "$d" ] || continue
  for f in "$d"/libfabric.so.1 "$d"/libnccl.so.2 "$d"/libnccl-net*.so "$d"/libpsm2.so.2 \
           "$d"/libucp.so.0 "$d"/openmpi/lib/openmpi3/mca_mtl_ofi.so "$d"/openmpi/mca_mtl_ofi.so; do
    [ -e "$f" ] && echo "lib $f $(readlink -f "$f")"
  done
  for f in "$d"/libibverbs/lib*-rdmav*.so; do [ -e "$f" ] && echo "provider $f"; done
done
for f in /opt/*/venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 \
         /usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2; do  # torch's pip NCCL
  [ -e "$f" ] && echo "lib $f $f"
done
echo "== verbs"  # the image's libibverbs and providers meeting the host's kernel drivers
t=$(command -v ibv_devinfo || ls /usr/local/rdma-core/bin/ibv_devinfo 2>/dev/null)
if [ -n "$t" ]; then "$t" -l 2>&1; else echo "fabric-bench: ibv_devinfo absent"; fi
echo "== ld_library_path $LD_LIBRARY_PATH"
echo "== devices"
for p in "$@"; do
  for f in $p; do
    if [ ! -e "$f" ]; then echo "dev $f missing -"
    elif [ -r "$f" ] && [ -w "$f" ]; then echo "dev $f ok $(stat -c %A "$f" 2>/dev/null)"
    else echo "dev $f denied $(stat -c %A "$f" 2>/dev/null)"; fi
  done
done
"""


@dataclass
class SideFacts:
    """What one side (host or image) has: versions, libraries, providers, device nodes."""

    reachable: bool = True
    why_not: str = ""
    libfabric: str | None = None
    ucx: str | None = None
    openmpi: str | None = None
    pmix: str | None = None  # the PMIx library's version (PMIx_Get_version)
    libs: dict | None = None  # basename -> resolved path
    providers: list | None = None  # provider file basenames: libmlx5-rdmav34.so
    devices: dict | None = None  # path -> (state, mode)
    verbs: list | None = None  # `ibv_devinfo -l` lines (stdout and stderr); None: not run
    ld_library_path: str = ""


def parse_side(text: str) -> SideFacts:
    """IMAGE_SCRIPT's output -> facts."""
    libs: dict = {}
    providers: list = []
    devices: dict = {}
    facts = SideFacts(libs=libs, providers=providers, devices=devices)
    section = None
    for line in text.splitlines():
        if line.startswith("== "):
            section, _, rest = line[3:].partition(" ")
            if section == "ld_library_path":
                facts.ld_library_path = rest.strip()
            continue
        if section == "fi_info" and (m := re.match(r"libfabric:\s*(\S+)", line)):
            facts.libfabric = m.group(1)
        elif section == "ucx_info" and (m := re.match(r"#\s*Version\s+(\S+)", line)):
            facts.ucx = m.group(1)
        elif section == "ompi_info" and (m := re.search(r"Open MPI v?(\d\S*)", line)):
            facts.openmpi = m.group(1)
        elif section == "pmix" and (m := re.search(r"PMIx v?(\d+\.\d+\.\d+)", line)):
            facts.pmix = m.group(1)
        elif section == "libs":
            kind, _, rest = line.partition(" ")
            if kind == "lib":
                path, _, resolved = rest.partition(" ")
                libs.setdefault(Path(path).name, resolved or path)
            elif kind == "provider":
                name = Path(rest.strip()).name
                if name not in providers:
                    providers.append(name)
        elif section == "verbs" and line.strip() and "ibv_devinfo absent" not in line:
            facts.verbs = [*(facts.verbs or []), line.strip()]
        elif section == "devices" and line.startswith("dev "):
            parts = line.split()
            if len(parts) >= 3:
                devices[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "-")
    return facts


Runner = Callable[[list[str]], tuple[int, str]]


def run_command(argv: list[str], timeout_s: float = 60.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout + ("\n" + proc.stderr if proc.returncode else "")


def host_device_state(path: str, opener: Callable[[str], int] | None = None) -> tuple[str, str]:
    """(ok | denied: <errno text> | missing, mode) of a device node on this host: opened for real."""
    try:
        mode = stat.filemode(os.stat(path).st_mode)
    except OSError:
        return "missing", "-"
    opener = opener or (lambda p: os.open(p, os.O_RDWR | os.O_NONBLOCK))
    try:
        os.close(opener(path))
    except PermissionError as exc:
        return f"denied: {exc.strerror}", mode
    except OSError as exc:  # ENXIO / ENODEV: a node without its device behind it
        return f"denied: {exc.strerror}", mode
    return "ok", mode


def host_side(run: Runner = run_command) -> SideFacts:
    """This host's libfabric, UCX and Open MPI versions (tools absent: None)."""
    facts = SideFacts(libs={}, providers=[], devices={})
    text = []
    for title, argv in (
        ("fi_info", ["fi_info", "--version"]),
        ("ucx_info", ["ucx_info", "-v"]),
        ("ompi_info", ["ompi_info", "--version"]),
    ):
        text.append(f"== {title}")
        if shutil.which(argv[0]):
            text.append(run(argv)[1])
    parsed = parse_side("\n".join(text))
    facts.libfabric, facts.ucx, facts.openmpi = parsed.libfabric, parsed.ucx, parsed.openmpi
    return facts


def existing_binds(binds) -> list:
    """The run's binds whose source exists now (the run directory is made after preflight)."""
    return [b for b in binds if os.path.exists(b.source)]


def image_side(spec, prepared, patterns: list[str], run: Runner = run_command) -> SideFacts:
    """The image's facts, from one shell inside the container with the run's binds and env."""
    runtime = prepared.plan.runtime
    if not runtime.containerised:
        argv = ["sh", "-c", IMAGE_SCRIPT, "preflight", *patterns]
    else:
        argv = runtime.wrap(
            prepared.plan.image,
            existing_binds(prepared.plan.binds),
            dict(prepared.plan.fabric_env),
            spec.gpus_per_node > 0,
            ["sh", "-c", IMAGE_SCRIPT, "preflight", *patterns],
        )
    code, out = run(argv)
    if code != 0 and "== devices" not in out:
        last = (out.strip().splitlines() or ["no output"])[-1]
        return SideFacts(reachable=False, why_not=f"exit {code}: {last[:200]}")
    return parse_side(out)


def host_rdma_drivers(root: Path = Path("/")) -> dict[str, str]:
    """RDMA device -> its kernel driver (mlx5_0 -> mlx5_core), from /sys/class/infiniband."""
    drivers = {}
    for dev in sorted((root / "sys/class/infiniband").glob("*")):
        link = dev / "device" / "driver"
        try:
            drivers[dev.name] = Path(os.readlink(link)).name
        except OSError:
            drivers[dev.name] = "?"
    return drivers


def major_minor(version: str | None) -> tuple[int, ...] | None:
    if not version:
        return None
    numbers = re.findall(r"\d+", version)
    return tuple(int(n) for n in numbers[:2]) if numbers else None
