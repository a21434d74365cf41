"""Version checks: libfabric, UCX and Open MPI on both sides, the symbol versions the image's
consumers need from a host library bound in, and Slurm's PMIx against the image's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from launch.ranks.launchers import launcher_of
from launch.site.preflight.checks import Check
from launch.site.preflight.facts import SideFacts, major_minor


def version_checks(spec, host: SideFacts, image: SideFacts) -> list[Check]:
    checks = []
    containerised = spec.containerised
    for name, attr in (("libfabric", "libfabric"), ("UCX", "ucx")):
        h, i = getattr(host, attr), getattr(image, attr)
        if not containerised:
            checks.append(Check(name, "ok" if h else "unknown", f"host {h or 'not installed'} (no container)", host=h))
        elif i is None:
            checks.append(Check(name, "unknown", f"image has no {name} tool; host {h or 'none'}", host=h))
        else:
            same = (
                "same version" if h == i else "versions differ; the image's own is loaded (the host's is not bound in)"
            )
            checks.append(Check(name, "ok", f"host {h or 'none'}, image {i}: {same}", host=h, image=i))
    if launcher_of(spec).host_mpirun and containerised:
        h, i = host.openmpi, image.openmpi
        if h is None or i is None:
            checks.append(
                Check(
                    "Open MPI (host mpirun -> image)",
                    "unknown" if i else "fail",
                    f"host {h or 'none'}, image {i or 'none'}",
                    fix="" if i else "build the image with Open MPI (the hybrid model runs the image's MPI)",
                    host=h,
                    image=i,
                )
            )
        elif (host_mm := major_minor(h)) is None or (image_mm := major_minor(i)) is None:
            checks.append(
                Check(
                    "Open MPI (host mpirun -> image)",
                    "unknown",
                    f"host {h}, image {i}: unreadable version",
                    host=h,
                    image=i,
                )
            )
        elif host_mm == image_mm:
            checks.append(Check("Open MPI (host mpirun -> image)", "ok", f"host {h}, image {i}", host=h, image=i))
        elif host_mm[:1] == image_mm[:1]:
            checks.append(
                Check(
                    "Open MPI (host mpirun -> image)",
                    "warn",
                    f"host {h}, image {i}: same major, different minor",
                    fix="use the same Open MPI series on the host as in the image",
                    host=h,
                    image=i,
                )
            )
        else:
            checks.append(
                Check(
                    "Open MPI (host mpirun -> image)",
                    "fail",
                    f"host {h}, image {i}: different major versions do not interoperate",
                    fix="load the host Open MPI that matches the image's (module load openmpi/...)",
                    host=h,
                    image=i,
                )
            )
    return checks


def abi_checks(
    spec, prepared, image: SideFacts, read_image_file: Callable[[str], bytes | None], host_libfabric_dir: str | None
) -> list[Check]:
    """The host's libfabric bound into the image (the Slingshot route): soname and symbol versions."""
    from launch.site import elf_versions

    if not host_libfabric_dir:
        return []
    host_lib = Path(host_libfabric_dir) / "libfabric.so.1"
    try:
        provider = host_lib.read_bytes()
    except OSError as exc:
        return [
            Check(
                "host libfabric (bound in)",
                "fail",
                f"{host_lib}: {exc.strerror}",
                fix="set host_libfabric in the site file to the directory holding the cxi libfabric.so.1",
            )
        ]
    try:
        name = elf_versions.soname(provider)
        have = elf_versions.defined(provider)
    except (elf_versions.NotElf, ValueError, IndexError, Exception) as exc:  # a truncated or foreign file
        return [Check("host libfabric (bound in)", "fail", f"{host_lib}: unreadable ELF ({exc})")]
    checks = []
    if name != "libfabric.so.1":
        checks.append(
            Check(
                "host libfabric soname",
                "fail",
                f"{host_lib} has soname {name!r}, the image loads libfabric.so.1",
                fix="bind a libfabric 1.x (soname libfabric.so.1)",
            )
        )
    newest = max(have, key=elf_versions.version_key, default="none")
    consumers = {k: v for k, v in (image.libs or {}).items() if k.startswith("libnccl-net") or k == "mca_mtl_ofi.so"}
    if not consumers:
        checks.append(
            Check(
                "libfabric ABI (host lib, image consumers)",
                "unknown",
                f"host defines up to {newest}; no libfabric consumer found in the image",
            )
        )
    for base, path in sorted(consumers.items()):
        data = read_image_file(path)
        if data is None:
            checks.append(Check(f"libfabric ABI ({base})", "unknown", f"could not read {path} from the image"))
            continue
        want = elf_versions.needed(data).get("libfabric.so.1", set())
        lacking = sorted(want - have, key=elf_versions.version_key)
        if lacking:
            checks.append(
                Check(
                    f"libfabric ABI ({base})",
                    "fail",
                    f"{path} needs {', '.join(lacking)}; host {host_lib} defines up to {newest}",
                    fix="bind a newer host libfabric, or rebuild the image against the host's version",
                    host=newest,
                    image=max(want, key=elf_versions.version_key),
                )
            )
        else:
            checks.append(
                Check(
                    f"libfabric ABI ({base})",
                    "ok",
                    f"needs {', '.join(sorted(want, key=elf_versions.version_key)) or 'nothing'}; "
                    f"host defines up to {newest}",
                    host=newest,
                )
            )
    return checks


# PMIx clients and servers of different releases interoperate from these releases on
# (Open MPI's PMIx cross-version matrix: first cross-version compatible 1.2.5, 2.0.3,
# 2.1.1, 3.0.0); before them, client and server must be the same series.
PMIX_CROSS_VERSION_FROM = (2, 1, 1)


def slurm_pmix_majors(srun_mpi_list: str) -> list[int]:
    """`srun --mpi=list` -> the major versions of Slurm's pmix plugins ("pmix_v4" -> 4)."""
    return sorted({int(m) for m in re.findall(r"\bpmix_v(\d+)\b", srun_mpi_list)})


def pmix_checks(spec, image: SideFacts, srun_mpi_list: tuple[int, str] | None) -> list[Check]:
    """srun --mpi=pmix: Slurm's PMIx server (on the host) meets the image's PMIx client.
    `srun_mpi_list`: exit code and output of `srun --mpi=list` (None: no srun here)."""
    name = "PMIx (Slurm srun --mpi=pmix -> image)"
    if srun_mpi_list is None:
        return [Check(name, "unknown", "srun not found here: Slurm's PMIx plugins unknown")]
    code, listing = srun_mpi_list
    if code != 0:
        last = (listing.strip().splitlines() or ["no output"])[-1][:200]
        return [Check(name, "unknown", f"`srun --mpi=list` failed (exit {code}): {last}")]
    plugins = re.findall(r"^\s+(\S+)\s*$", listing, re.M)
    majors = slurm_pmix_majors(listing)
    host = ",".join(f"pmix_v{m}" for m in majors) or None
    if "pmix" not in plugins:
        return [
            Check(
                name,
                "fail",
                f"Slurm here has no pmix plugin (has {', '.join(plugins) or 'none'})",
                fix="use --mpi-plugin pmi2 with an image built with Slurm's PMI-2, or ask for Slurm's pmix plugin",
            )
        ]
    if image.pmix is None:
        return [
            Check(
                name,
                "unknown",
                f"host {host or 'pmix'}; the image's libpmix.so.2 was not found or not readable",
                host=host,
            )
        ]
    client = tuple(int(n) for n in image.pmix.split("."))
    if not majors:
        return [
            Check(
                name,
                "unknown",
                f"Slurm's pmix plugin does not name its version; image PMIx {image.pmix}",
                image=image.pmix,
            )
        ]
    if client[0] in majors:
        return [Check(name, "ok", f"host {host}, image PMIx {image.pmix}: same series", host=host, image=image.pmix)]
    if client >= PMIX_CROSS_VERSION_FROM and min(majors) >= 3:
        return [
            Check(
                name,
                "ok",
                f"host {host}, image PMIx {image.pmix}: different series, cross-version compatible (both >= 2.1.1)",
                host=host,
                image=image.pmix,
            )
        ]
    return [
        Check(
            name,
            "fail",
            f"host {host}, image PMIx {image.pmix}: these releases do not interoperate",
            fix="build the image with a PMIx >= 2.1.1 (cross-version compatible) or the host's series",
            host=host,
            image=image.pmix,
        )
    ]
