"""What an image build takes from this host, each cached by what it is made of: the cpu base
(debootstrap -> base.sif), the Horovod wheel, the wheelhouse of the pinned Python stack, and the
hashes that key builds by their inputs."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from containers import sources, stack
from containers.digest import remembered_sha256
from containers.files import sha256_bytes
from containers.host import BuildError, Progress, cache_dir, debian_mirror, debootstrap_root, run_logged, runtime_binary


def hash_files(paths: list[Path], root: Path = stack.REPO) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def image_sha256(path: Path) -> str:
    return remembered_sha256(path, cache_dir())  # the runs that use the image will ask again


def base_image(log: Path, progress: Progress = print) -> Path:
    """The cpu flavour's base: debootstrap minbase bookworm -> base.sif, cached."""
    mirror = debian_mirror()
    key = sha256_bytes(f"{stack.DEBIAN_SUITE} minbase {mirror} {stack.BASE_VERSION}".encode())[:16]
    final = cache_dir() / "base" / f"{stack.DEBIAN_SUITE}-{key}" / "base.sif"
    if final.exists():
        return final
    if not shutil.which("debootstrap"):
        raise BuildError("base image missing and debootstrap not installed (apt-get install debootstrap)")
    apptainer = runtime_binary("apptainer")
    final.parent.mkdir(parents=True, exist_ok=True)
    # debootstrap cannot chroot into a path with spaces: the root is made under the
    # system's temporary directory, then packed into the cache
    with tempfile.TemporaryDirectory(prefix="fabric-bench-rootfs.") as work:
        root = Path(work) / "rootfs"
        debootstrap_root(root, log, stack.DEBIAN_SUITE, progress)
        sources.install_wget(root)
        progress("base image: apptainer build base.sif")
        partial = final.with_suffix(".sif.partial")
        run_logged([apptainer, "build", "--force", str(partial), str(root)], log, "building base.sif")
        partial.rename(final)
    return final


# The host's Horovod (build-wheel.sh --host: without debug info, one gloo); scripts/setup.sh asks the same
HOST_HOROVOD_BUILD = ("--host",)


def horovod_wheel(log: Path) -> Path:
    """The host's Horovod wheel (built once by containers/horovod/build-wheel.sh, as
    scripts/setup.sh builds it: HOST_HOROVOD_BUILD)."""
    with log.open("a") as err:
        out = subprocess.run(
            [str(stack.HOROVOD_DIR / "build-wheel.sh"), sys.executable, str(cache_dir()), *HOST_HOROVOD_BUILD],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    # the script's last line is the wheel's path, which may hold spaces (a cache under "cold start é")
    wheel = Path(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else Path()
    if out.returncode != 0 or not wheel.is_file():
        raise BuildError(f"Horovod wheel build failed; log: {log}")
    return wheel


def wheelhouse_key(wheel: Path) -> str:
    """The pinned requirements, the Python and the Horovod wheel's folder (horovod-<key of every
    input of its build>), not only its name, which a rebuild with other inputs keeps: a new
    Horovod makes a new wheelhouse, and so a new stack image."""
    pinned = hash_files([stack.REQUIREMENTS, stack.REQUIREMENTS_NODEPS])
    return sha256_bytes((pinned + wheel.parent.name + wheel.name + sys.version).encode())[:16]


def wheelhouse(log: Path, progress: Progress = print) -> Path:
    """Local wheels of the Python stack (this host's pip), bound into cpu builds."""
    wheel = horovod_wheel(log)
    key = wheelhouse_key(wheel)
    final = cache_dir() / f"wheelhouse-{key}"
    if final.exists():
        return final
    progress("wheelhouse: pip download of the pinned stack (local wheels; ~1-2 min)")
    partial = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f"wheelhouse-{key}."))
    try:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(partial)]
        run_logged([*pip, "-r", str(stack.REQUIREMENTS)], log, "pip download")
        run_logged([*pip, "--no-deps", "-r", str(stack.REQUIREMENTS_NODEPS)], log, "pip download")
        for path in (stack.REQUIREMENTS, stack.REQUIREMENTS_NODEPS, wheel):
            shutil.copy2(path, partial / path.name)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final
