"""The build driver behind `make image` and `fabric-bench image build`.

render -> build with apptainer (or podman) -> record. Builds are cached by a
hash of every input (rendered recipe, bench/ sources, the wheelhouse, the base
image); each built image is recorded with its sha256 digest and build log in
CACHE/images/registry.json. A build writes to a temporary name and is renamed
only when it succeeded: a failure never leaves an image under the final name.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from containers import recipe as recipes
from containers import stack
from containers.digest import remembered_sha256
from containers.fabrics import FABRICS

RUNTIMES = ("apptainer", "podman")
# Fast compression keeps a multi-GB image build short on 2 cores (~2x bigger than gzip's).
SQUASHFS_ARGS = os.environ.get("FABRIC_BENCH_SQUASHFS_ARGS", "-comp lz4")

Progress = Callable[[str], None]


class BuildError(Exception):
    """One line: the cause and the log path (the CLI turns it into exit 2)."""


def cache_dir() -> Path:
    root = os.environ.get("FABRIC_BENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fabric-bench")
    return Path(root)


@dataclass(frozen=True)
class ImageRecord:
    fabric: str
    flavour: str
    runtime: str
    image: str                 # .sif path (apptainer) or image name (podman)
    sha256: str
    size_bytes: int
    input_key: str
    recipe_hash: str
    bundle_commit: str
    built_at: str
    build_seconds: float
    log: str


def check_choice(kind: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BuildError(f"unknown {kind} {value!r}; choose from {', '.join(choices)}")


def runtime_binary(runtime: str) -> str:
    check_choice("runtime", runtime, RUNTIMES)
    path = shutil.which(runtime)
    if not path:
        raise BuildError(f"container runtime {runtime!r} not found on PATH "
                         f"(CI/dev hosts: scripts/provision-apptainer.sh)")
    return path


def _run_logged(argv: list[str], log: Path, what: str, **kwargs) -> None:
    """Run argv, appending its output to log; a failure is one BuildError line."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        try:
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, **kwargs).returncode
        except OSError as exc:
            raise BuildError(f"{what} failed ({exc}); log: {log}") from None
    if code != 0:
        raise BuildError(f"{what} failed (exit {code}); log: {log}")


def _hash_files(paths: list[Path], root: Path = stack.REPO) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    return remembered_sha256(path, cache_dir())  # the runs that use the image will ask again


# Inputs -------------------------------------------------------------------
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


def base_image(log: Path, progress: Progress = print) -> Path:
    """The cpu flavour's base: debootstrap minbase bookworm -> base.sif, cached."""
    mirror = debian_mirror()
    key = hashlib.sha256(f"{stack.DEBIAN_SUITE} minbase {mirror} v1".encode()).hexdigest()[:16]
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
        progress(f"base image: debootstrap {stack.DEBIAN_SUITE} minbase from {mirror} (~1 min)")
        _run_logged(["debootstrap", "--variant=minbase", stack.DEBIAN_SUITE, str(root), mirror],
                    log, "debootstrap of the base image")
        for node in (root / "dev").iterdir():     # apptainer binds /dev itself
            subprocess.run(["rm", "-rf", str(node)], check=True)
        (root / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        progress("base image: apptainer build base.sif")
        partial = final.with_suffix(".sif.partial")
        _run_logged([apptainer, "build", "--force", str(partial), str(root)], log,
                    "building base.sif")
        partial.rename(final)
    return final


def horovod_wheel(log: Path) -> Path:
    """The host's Horovod wheel (built once by containers/horovod/build-wheel.sh)."""
    with log.open("a") as err:
        out = subprocess.run([str(stack.HOROVOD_DIR / "build-wheel.sh"), sys.executable,
                              str(cache_dir())], stdout=subprocess.PIPE, stderr=err, text=True)
    wheel = Path(out.stdout.strip().split()[-1]) if out.stdout.strip() else Path()
    if out.returncode != 0 or not wheel.is_file():
        raise BuildError(f"Horovod wheel build failed; log: {log}")
    return wheel


def wheelhouse(log: Path, progress: Progress = print) -> Path:
    """Local wheels of the Python stack (this host's pip), bound into cpu builds."""
    wheel = horovod_wheel(log)
    key = hashlib.sha256((_hash_files([stack.REQUIREMENTS, stack.REQUIREMENTS_NODEPS])
                          + wheel.name + sys.version).encode()).hexdigest()[:16]
    final = cache_dir() / f"wheelhouse-{key}"
    if final.exists():
        return final
    progress("wheelhouse: pip download of the pinned stack (local wheels; ~1-2 min)")
    partial = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f"wheelhouse-{key}."))
    try:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(partial)]
        _run_logged([*pip, "-r", str(stack.REQUIREMENTS)], log, "pip download")
        _run_logged([*pip, "--no-deps", "-r", str(stack.REQUIREMENTS_NODEPS)], log, "pip download")
        for path in (stack.REQUIREMENTS, stack.REQUIREMENTS_NODEPS, wheel):
            shutil.copy2(path, partial / path.name)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


# Registry -----------------------------------------------------------------
def registry_path() -> Path:
    return cache_dir() / "images" / "registry.json"


def registry() -> list[dict]:
    path = registry_path()
    return json.loads(path.read_text()) if path.exists() else []


def _record(entry: ImageRecord) -> None:
    """Record entry; older apptainer images of the same (fabric, flavour) are
    deleted (each is several GB) and leave the registry with their files."""
    entries = []
    for old in registry():
        if old["image"] == entry.image:
            continue
        if (old["fabric"], old["flavour"], old["runtime"]) == (entry.fabric, entry.flavour, "apptainer") \
                and entry.runtime == "apptainer":
            Path(old["image"]).unlink(missing_ok=True)
            continue
        entries.append(old)
    entries.append(asdict(entry))
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=2) + "\n")
    tmp.replace(path)


def find(fabric: str, flavour: str, runtime: str = "apptainer") -> Optional[dict]:
    """The newest recorded image of (fabric, flavour, runtime) that still exists."""
    for entry in reversed(registry()):
        if (entry["fabric"], entry["flavour"], entry["runtime"]) == (fabric, flavour, runtime) and \
                (runtime != "apptainer" or Path(entry["image"]).exists()):
            return entry
    return None


# Build --------------------------------------------------------------------
def build(fabric: str, flavour: str, runtime: str = "apptainer", *,
          progress: Progress = print) -> ImageRecord:
    """Build (or reuse) the image of (fabric, flavour) with runtime; returns its record."""
    check_choice("fabric", fabric, FABRICS)
    check_choice("flavour", flavour, stack.FLAVOURS)
    binary = runtime_binary(runtime)
    images = cache_dir() / "images"
    (images / "logs").mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    log = images / "logs" / f"{fabric}-{flavour}-{runtime}-{stamp}.log"
    log.touch()

    inputs = {"runtime": runtime, "squashfs": SQUASHFS_ARGS,
              "bundle": _hash_files([*stack.REPO.glob("bench/*.py"), stack.REPO / "containers/image-test.sh"])}
    binds: list[str] = []
    base = ""
    if flavour == "cpu":
        if runtime == "apptainer":
            base_sif = base_image(log, progress)
            base, inputs["base"] = str(base_sif), _sha256(base_sif)
        else:
            base, inputs["base"] = stack.BASE_IMAGE_TAG, _podman_base(binary, log, progress)
        wheels = wheelhouse(log, progress)
        inputs["wheelhouse"] = wheels.name
        binds = [f"{wheels}:{stack.WHEELHOUSE}"]
    rendered = recipes.render(fabric, flavour, base=base)
    inputs["recipe"] = rendered.recipe_hash
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    name = f"{fabric}-{flavour}-{key}"

    cached = next((e for e in registry() if e["input_key"] == key and e["runtime"] == runtime), None)
    if cached and (runtime != "apptainer" or Path(cached["image"]).exists()):
        progress(f"cached: {cached['image']}")
        log.unlink()
        return ImageRecord(**cached)

    recipe_dir = images / "recipes" / name
    recipe_dir.mkdir(parents=True, exist_ok=True)
    (recipe_dir / "image.def").write_text(rendered.definition)
    (recipe_dir / "Dockerfile").write_text(rendered.dockerfile)
    progress(f"building {name} with {runtime} (log: {log})")
    started = time.monotonic()
    if runtime == "apptainer":
        image, digest, size = _build_apptainer(binary, recipe_dir / "image.def",
                                               images / f"{name}.sif", binds, log)
    else:
        image, digest, size = _build_podman(binary, recipe_dir / "Dockerfile", name, binds, log)
    entry = ImageRecord(fabric, flavour, runtime, image, digest, size, key, rendered.recipe_hash,
                        recipes.bundle_commit(), dt.datetime.now(dt.timezone.utc).isoformat(),
                        round(time.monotonic() - started, 1), str(log))
    _record(entry)
    return entry


def _build_apptainer(binary: str, definition: Path, final: Path, binds: list[str],
                     log: Path) -> tuple[str, str, int]:
    partial = final.with_name(final.name + ".partial")
    argv = [binary, "build", "--fakeroot", "--force", "--mksquashfs-args", SQUASHFS_ARGS]
    for bind in binds:
        argv += ["--bind", bind]
    try:
        _run_logged([*argv, str(partial), str(definition)], log, f"apptainer build of {final.name}",
                    cwd=stack.REPO)    # %files paths are relative to the bundle root
        partial.rename(final)
    finally:
        partial.unlink(missing_ok=True)
    return str(final), _sha256(final), final.stat().st_size


def _podman_env() -> dict[str, str]:
    """podman on these hosts: runc (crun refuses the hybrid cgroup host) and
    ulimits that need no CAP_SYS_RESOURCE (see ../shared/ENVIRONMENT.md)."""
    conf = cache_dir() / "podman-containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('[engine]\nruntime = "runc"\n[containers]\n'
                    'default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]\n')
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(conf))}


def _podman_base(binary: str, log: Path, progress: Progress) -> str:
    """Import the debootstrap rootfs as the podman base image; returns its id."""
    env = _podman_env()
    found = subprocess.run([binary, "image", "inspect", "--format", "{{.Id}}", stack.BASE_IMAGE_TAG],
                           capture_output=True, text=True, env=env)
    if found.returncode == 0:
        return found.stdout.strip()
    sif = base_image(log, progress)
    with tempfile.TemporaryDirectory() as work:
        _run_logged(["unsquashfs", "-q", "-d", f"{work}/rootfs", str(sif)], log, "unpacking base.sif")
        tar = subprocess.Popen(["tar", "-C", f"{work}/rootfs", "-c", "."], stdout=subprocess.PIPE)
        _run_logged([binary, "import", "-", stack.BASE_IMAGE_TAG], log, "podman import of the base",
                    stdin=tar.stdout, env=env)
        tar.wait()
    return subprocess.run([binary, "image", "inspect", "--format", "{{.Id}}", stack.BASE_IMAGE_TAG],
                          capture_output=True, text=True, env=env).stdout.strip()


def _build_podman(binary: str, dockerfile: Path, name: str, binds: list[str],
                  log: Path) -> tuple[str, str, int]:
    env = _podman_env()
    tag = f"localhost/fabric-bench:{name}"
    argv = [binary, "build", "--network=host", "-f", str(dockerfile), "-t", tag]
    for bind in binds:
        argv += ["-v", f"{bind}:ro"]
    _run_logged([*argv, str(stack.REPO)], log, f"podman build of {tag}", env=env)
    info = json.loads(subprocess.run([binary, "image", "inspect", tag], capture_output=True,
                                     text=True, env=env, check=True).stdout)[0]
    return tag, info["Id"], int(info.get("Size", 0))


def inspect(image: str) -> dict:
    """Labels of a built .sif (apptainer inspect --json)."""
    binary = runtime_binary("apptainer")
    if not Path(image).is_file():
        raise BuildError(f"image not found: {image}")
    out = subprocess.run([binary, "inspect", "--json", "--labels", image], capture_output=True, text=True)
    if out.returncode != 0:
        raise BuildError(f"apptainer inspect {image} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)["data"]["attributes"]["labels"]
