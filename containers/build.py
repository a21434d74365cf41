"""The build driver behind `make image` and `fabric-bench image build`.

render -> build with apptainer (or podman) -> record. `build(fabric, flavour)`
first builds (or reuses) the flavour's stack image (`build_stack`: the common
stack, for cuda/Apptainer a devel image and the runtime stack image), then the
fabric image FROM it, labelled with the stack image's sha256. Builds are
cached by a hash of every input (rendered recipe, bench/ sources, the
self-test script for fabric images, the wheelhouse, the base image, the
rehearsal's sources; a fabric image also by its stack's digest); each built
image is recorded with its sha256 digest, seconds per stage and build log in
CACHE/images/registry.json. `base="local"` builds the cuda flavour on the
local CUDA base (containers/cudabase.py) with the verified sources bound in.
A build writes to a temporary name with `--notest`, runs `apptainer test`,
and is renamed only when both succeeded: a failure never leaves an image
under the final name and records nothing.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from containers import recipe as recipes
from containers import sources, stack
from containers.digest import remembered_sha256
from containers.files import sha256_bytes, write_json_atomic
from containers.fabrics import FABRICS
from containers.host import (RUNTIMES, BuildError, Progress, cache_dir, debian_mirror, debootstrap_root,  # noqa: F401
                             run_logged, runtime_binary)  # BuildError, cache_dir, debian_mirror: the driver's API too

# Fast compression keeps a multi-GB image build short on 2 cores (~2x bigger than gzip's).
SQUASHFS_ARGS = os.environ.get("FABRIC_BENCH_SQUASHFS_ARGS", "-comp lz4")

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
    base: str = "site"
    omitted: list = field(default_factory=list)     # components a rehearsal could not fetch
    stages: dict = field(default_factory=dict)      # seconds per build stage
    stack_digest: str = ""                          # sha256 of the stack image it was built FROM
    stack_image: str = ""
    stack_stages: dict = field(default_factory=dict)
    devel_image: str = ""                           # cuda stack: its devel stage's image


def check_choice(kind: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BuildError(f"unknown {kind} {value!r}; choose from {', '.join(choices)}")


def _hash_files(paths: list[Path], root: Path = stack.REPO) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _sha256(path: Path) -> str:
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
        run_logged([apptainer, "build", "--force", str(partial), str(root)], log,
                    "building base.sif")
        partial.rename(final)
    return final


def horovod_wheel(log: Path) -> Path:
    """The host's Horovod wheel (built once by containers/horovod/build-wheel.sh)."""
    with log.open("a") as err:
        out = subprocess.run([str(stack.HOROVOD_DIR / "build-wheel.sh"), sys.executable,
                              str(cache_dir())], stdout=subprocess.PIPE, stderr=err, text=True)
    # the script's last line is the wheel's path, which may hold spaces (a cache under "cold start é")
    wheel = Path(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else Path()
    if out.returncode != 0 or not wheel.is_file():
        raise BuildError(f"Horovod wheel build failed; log: {log}")
    return wheel


def wheelhouse(log: Path, progress: Progress = print) -> Path:
    """Local wheels of the Python stack (this host's pip), bound into cpu builds."""
    wheel = horovod_wheel(log)
    key = sha256_bytes((_hash_files([stack.REQUIREMENTS, stack.REQUIREMENTS_NODEPS])
                        + wheel.name + sys.version).encode())[:16]
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
            if old.get("devel_image"):
                Path(old["devel_image"]).unlink(missing_ok=True)
            continue
        entries.append(old)
    entries.append(asdict(entry))
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, entries)


def find(fabric: str, flavour: str, runtime: str = "apptainer") -> Optional[dict]:
    """The newest recorded image of (fabric, flavour, runtime) that still exists."""
    for entry in reversed(registry()):
        if (entry["fabric"], entry["flavour"], entry["runtime"]) == (fabric, flavour, runtime) and \
                (runtime != "apptainer" or Path(entry["image"]).exists()):
            return entry
    return None


# Build --------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What one build needs besides the recipe: binds, input key parts, what it omits."""
    runtime: str
    flavour: str
    base: str                      # "site" | "local" (cuda); cpu is always a local Debian base
    binds: tuple[str, ...]
    inputs: dict
    paths: dict                    # recipe placeholders -> paths (local bases)
    omit: tuple[str, ...]
    log: Path


def _prepare(flavour: str, runtime: str, base: str, log: Path, progress: Progress) -> Plan:
    binary = runtime_binary(runtime)
    # bench/ is in the stack image; the self-test script is copied into each fabric image
    # too (its %test uses that copy), so only fabric builds depend on it
    inputs: dict = {"runtime": runtime, "squashfs": SQUASHFS_ARGS, "base-kind": base,
                    "bundle": _hash_files([*stack.REPO.glob("bench/*.py")])}
    binds: list[str] = []
    paths: dict = {}
    omit: tuple[str, ...] = ()
    if flavour in stack.CPU_FLAVOURS:
        if runtime == "apptainer":
            base_sif = base_image(log, progress)
            paths["cpu_base"], inputs["base"] = str(base_sif), _sha256(base_sif)
        else:
            paths["cpu_base"], inputs["base"] = stack.BASE_IMAGE_TAG, _podman_base(binary, log, progress)
        wheels = wheelhouse(log, progress)
        inputs["wheelhouse"] = wheels.name
        binds = [f"{wheels}:{stack.WHEELHOUSE}"]
        if flavour == "cpu":        # cpu-debian fetches no sources: its stack is Debian's packages
            served = _verified_sources(progress)
            inputs["sources"] = (served / "urls.tsv").read_text()
            binds.append(f"{served}:{sources.REHEARSAL}/sources")
    elif base == "local":
        from containers import cudabase
        devel, runtime_base = cudabase.local_bases(log, progress)
        served = _verified_sources(progress)
        inputs["base"] = [_sha256(devel), _sha256(runtime_base)]
        inputs["sources"] = (served / "urls.tsv").read_text()
        paths = {"LOCAL_DEVEL_BASE": str(devel), "LOCAL_RUNTIME_BASE": str(runtime_base)}
        omit = sources.omitted()
        binds = [f"{served}:{sources.REHEARSAL}/sources", f"{_ca_bundle_dir()}:{sources.REHEARSAL}/certs"]
        wheels = cache_dir() / "rehearsal-wheels"
        if wheels.is_dir():      # local wheels first (pip.conf of the local base); PyPI for the rest
            binds.append(f"{wheels}:{sources.REHEARSAL}/wheels")
        if runtime != "apptainer":
            raise BuildError("--base local builds with apptainer only (podman: use the cpu flavour)")
    return Plan(runtime, flavour, base, tuple(binds), inputs, paths, omit, log)


def _verified_sources(progress: Progress) -> Path:
    """The folder the bases' wget serves the canonical source URLs from (containers/sources.py)."""
    try:
        return sources.fetch(cache_dir(), debian_mirror(), progress)
    except sources.FetchError as exc:
        raise BuildError(f"sources: {exc}") from None


def _ca_bundle_dir() -> Path:
    """A copy of this host's CA bundle in the cache, for pip inside a rehearsal build: a bind of
    /etc/ssl/certs would give the build the bundle of whatever root apptainer runs from (a sid
    root here, whose bundle lacks this machine's registry CA)."""
    bundle = Path(os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile
                  or "/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise BuildError(f"no CA bundle at {bundle} for pip inside the build (set SSL_CERT_FILE)")
    folder = cache_dir() / "certs"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bundle, folder / "ca-certificates.crt")
    return folder


def _new_log(name: str) -> Path:
    images = cache_dir() / "images"
    (images / "logs").mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    log = images / "logs" / f"{name}-{stamp}.log"
    log.touch()
    return log


def _key(plan: Plan, recipe_hash: str, extra: str = "") -> str:
    return sha256_bytes(json.dumps({**plan.inputs, "recipe": recipe_hash, "extra": extra},
                                   sort_keys=True).encode())[:16]


def _devel_key(plan: Plan, recipe_hash: str) -> str:
    """The stack's devel stage is keyed without bench/ and the wheelhouse, which only its
    runtime stage takes in: editing bench/ does not rebuild the communication stack."""
    inputs = {k: v for k, v in plan.inputs.items() if k not in ("bundle", "wheelhouse")}
    return sha256_bytes(json.dumps({**inputs, "recipe": recipe_hash}, sort_keys=True).encode())[:16]


def _cached(key: str, runtime: str) -> Optional[dict]:
    entry = next((e for e in registry() if e["input_key"] == key and e["runtime"] == runtime), None)
    if entry and (runtime != "apptainer" or Path(entry["image"]).exists()):
        return entry
    return None


def _devel_stage(binary: str, rendered: recipes.Recipe, plan: Plan, recipe_dir: Path, devel_sif: Path,
                 log: Path, progress: Progress) -> float:
    """Build the stack's devel stage, or reuse the one a build of the same key finished
    (its name carries the key; it appears only when complete): its seconds and build log
    travel with it (`.json` beside it), so a record made later still shows them."""
    sidecar = devel_sif.with_suffix(".json")
    if devel_sif.exists() and sidecar.exists():
        earlier = json.loads(sidecar.read_text())
        progress(f"reusing {devel_sif.name} (the devel stage, built in {earlier['seconds']:.0f} s)")
        with log.open("a") as out:
            out.write(f"\n# the devel stage was reused; its build log ({earlier['log']}) follows\n")
            out.write(Path(earlier["log"]).read_text(errors="replace"))
        return earlier["seconds"]
    (recipe_dir / "stack-devel.def").write_text(_fill(rendered, plan).devel_definition)
    progress(f"building {devel_sif.name} (the devel stage; log: {log})")
    seconds, _ = _build_apptainer(binary, recipe_dir / "stack-devel.def", devel_sif, list(plan.binds), log,
                                  test=False)
    devel_log = devel_sif.with_suffix(".log")
    shutil.copyfile(log, devel_log)
    write_json_atomic(sidecar, {"seconds": seconds, "log": str(devel_log)})
    return seconds


def _fill(rendered: recipes.Recipe, plan: Plan, **more: str) -> recipes.Recipe:
    return rendered.filled(**{k: v for k, v in plan.paths.items() if k != "cpu_base"}, **more)


def build_stack(flavour: str, runtime: str = "apptainer", *, base: str = "site",
                progress: Progress = print) -> ImageRecord:
    """Build (or reuse) the stack image of a flavour: the common stack every fabric image
    of the flavour is built FROM (apptainer: stack-devel.sif too)."""
    check_choice("flavour", flavour, stack.FLAVOURS)
    check_choice("base", base, recipes.BASES)
    binary = runtime_binary(runtime)
    log = _new_log(f"stack-{flavour}-{runtime}")
    plan = _prepare(flavour, runtime, base, log, progress)
    rendered = recipes.render_stack(flavour, base=base, cpu_base=plan.paths.get("cpu_base", ""),
                                    omit=plan.omit)
    key = _key(plan, rendered.recipe_hash)
    cached = _cached(key, runtime)
    if cached:
        progress(f"cached stack: {cached['image']}")
        log.unlink()
        return ImageRecord(**cached)
    images = cache_dir() / "images"
    name = f"stack-{flavour}-{key}"
    recipe_dir = images / "recipes" / name
    recipe_dir.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = {}
    if runtime == "apptainer":
        devel_image = ""
        if rendered.devel_template:
            devel_sif = images / f"stack-{flavour}-devel-{_devel_key(plan, rendered.recipe_hash)}.sif"
            stages["stack-devel"] = _devel_stage(binary, rendered, plan, recipe_dir, devel_sif, log, progress)
            devel_image = str(devel_sif)
        filled = _fill(rendered, plan, STACK_DEVEL_IMAGE=devel_image) if devel_image else rendered
        (recipe_dir / "image.def").write_text(filled.definition)
        (recipe_dir / "Dockerfile").write_text(rendered.dockerfile)
        progress(f"building {name}.sif (log: {log})")
        seconds, test_seconds = _build_apptainer(binary, recipe_dir / "image.def", images / f"{name}.sif",
                                                 list(plan.binds), log)
        stages["stack"], stages["stack-test"] = seconds, test_seconds
        image = images / f"{name}.sif"
        digest, size = _sha256(image), image.stat().st_size
        image_name = str(image)
    else:
        (recipe_dir / "Dockerfile").write_text(rendered.dockerfile)
        started = time.monotonic()
        tag = recipes.stack_tag(flavour)
        if len(rendered_stages := re.findall(r"^FROM .* AS (\S+)$", rendered.dockerfile, re.M)) > 1:
            # the devel stage under its own name: fabric layers that build start FROM it
            _build_podman(binary, recipe_dir / "Dockerfile", tag, list(plan.binds), log,
                          tag_as=f"{tag}-{rendered_stages[0]}", target=rendered_stages[0])
        image_name, digest, size = _build_podman(binary, recipe_dir / "Dockerfile", tag, list(plan.binds), log,
                                                 tag_as=tag)
        stages["stack"] = round(time.monotonic() - started, 1)
        devel_image = ""
    entry = ImageRecord("stack", flavour, runtime, image_name, digest, size, key, rendered.recipe_hash,
                        recipes.bundle_commit(), dt.datetime.now(dt.timezone.utc).isoformat(),
                        round(sum(stages.values()), 1), str(log), base=base, omitted=list(plan.omit),
                        stages=stages, devel_image=devel_image)
    _record(entry)
    _write_sbom(entry, plan)
    return entry


def build(fabric: str, flavour: str, runtime: str = "apptainer", *, base: str = "site",
          progress: Progress = print) -> ImageRecord:
    """Build (or reuse) the image of (fabric, flavour) FROM its stack image (built first
    when missing); returns its record."""
    check_choice("fabric", fabric, FABRICS)
    check_choice("flavour", flavour, stack.FLAVOURS)
    check_choice("base", base, recipes.BASES)
    binary = runtime_binary(runtime)
    stack_entry = build_stack(flavour, runtime, base=base, progress=progress)
    log = _new_log(f"{fabric}-{flavour}-{runtime}")
    plan = _prepare(flavour, runtime, base, log, progress)
    rendered = recipes.render(fabric, flavour, base=base, omit=plan.omit)
    key = _key(plan, rendered.recipe_hash,
               extra=stack_entry.sha256 + _hash_files([stack.REPO / "containers/image-test.sh"]))
    name = f"{fabric}-{flavour}-{key}"
    cached = _cached(key, runtime)
    if cached:
        progress(f"cached: {cached['image']}")
        log.unlink()
        return ImageRecord(**cached)
    filled = _fill(rendered, plan, STACK_IMAGE=stack_entry.image, STACK_DIGEST=stack_entry.sha256,
                   STACK_DEVEL_IMAGE=stack_entry.devel_image or "")
    images = cache_dir() / "images"
    recipe_dir = images / "recipes" / name
    recipe_dir.mkdir(parents=True, exist_ok=True)
    (recipe_dir / "image.def").write_text(filled.definition)
    dockerfile = rendered.dockerfile.replace(recipes.STACK_DIGEST, stack_entry.sha256)
    (recipe_dir / "Dockerfile").write_text(dockerfile)
    progress(f"building {name} with {runtime} FROM the stack {Path(stack_entry.image).name} (log: {log})")
    stages: dict[str, float] = {}
    if runtime == "apptainer":
        # the fabric layer installs OS packages, or builds from the stack's devel image: the plan's
        # binds (sources, wheels) in both stages, whose bases have their mount points
        seconds, test_seconds = _build_apptainer(binary, recipe_dir / "image.def", images / f"{name}.sif",
                                                 list(plan.binds), log)
        stages["fabric"], stages["fabric-test"] = seconds, test_seconds
        image = images / f"{name}.sif"
        image_name, digest, size = str(image), _sha256(image), image.stat().st_size
    else:
        started = time.monotonic()
        image_name, digest, size = _build_podman(binary, recipe_dir / "Dockerfile", name, list(plan.binds), log)
        stages["fabric"] = round(time.monotonic() - started, 1)
    entry = ImageRecord(fabric, flavour, runtime, image_name, digest, size, key, rendered.recipe_hash,
                        recipes.bundle_commit(), dt.datetime.now(dt.timezone.utc).isoformat(),
                        round(sum(stages.values()), 1), str(log), base=base, omitted=list(plan.omit),
                        stages=stages, stack_digest=stack_entry.sha256, stack_image=stack_entry.image,
                        stack_stages=stack_entry.stages)
    _record(entry)
    _write_sbom(entry, plan)
    return entry


def _write_sbom(entry: ImageRecord, plan: Plan) -> None:
    """The built image's bill of materials beside it (containers/sbom.py)."""
    from containers import sbom
    base = plan.inputs.get("base")
    base_digest = base if isinstance(base, str) else ",".join(base or [])
    sbom.write_for(entry.image, entry.runtime, fabric=entry.fabric, flavour=entry.flavour,
                   image_digest=entry.sha256, base_digest=f"sha256:{base_digest.removeprefix('sha256:')}"
                   if base_digest else "", stack_digest=entry.stack_digest)


def _build_apptainer(binary: str, definition: Path, final: Path, binds: list[str],
                     log: Path, test: bool = True) -> tuple[float, float]:
    """Build to a partial name, run its %test, rename: (build seconds, test seconds).
    A failing %test is one BuildError line; nothing is left under the final name."""
    partial = final.with_name(final.name + ".partial")
    # hpccm's blocks unpack and build under /var/tmp, which apptainer binds from the host: two
    # builds at once (a cpu and a cuda stack) shared one /var/tmp/ucx-1.13.1 tree, and the cpu
    # build installed the cuda build's configuration. Each build gets a /var/tmp of its own.
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.var-tmp-", dir=final.parent))
    argv = [binary, "build", "--fakeroot", "--force", "--notest", "--mksquashfs-args", SQUASHFS_ARGS,
            "--bind", f"{scratch}:/var/tmp"]
    for bind in binds:
        argv += ["--bind", bind]
    try:
        started = time.monotonic()
        _build_sif([*argv, str(partial), str(definition)], log, f"apptainer build of {final.name}")
        built = time.monotonic()
        if test:
            run_logged([binary, "test", str(partial)], log, f"%test of {final.name}", cwd=stack.REPO,
                        stamped=True)
        tested = time.monotonic()
        partial.rename(final)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return round(built - started, 1), round(tested - built, 1)


# Twice in CI (fabric layers FROM the stack, each near the end of its build) and never on a
# development machine, apptainer exited 255 after every step of the recipe had passed, while
# packing the SIF; the logs went with CI's machines (suspected: sid's mksquashfs 4.7.5, now
# replaced, see scripts/provision-apptainer.sh). Such a build, and only such a one, is run
# once more, and its log says so.
PACKING = "INFO:    Creating SIF file..."


def _build_sif(argv: list[str], log: Path, what: str) -> None:
    """`apptainer build ARGV`, once more when it failed while packing the SIF."""
    start = log.stat().st_size if log.exists() else 0
    try:
        run_logged(argv, log, what, cwd=stack.REPO, stamped=True)  # %files paths: relative to the bundle
    except BuildError:
        with log.open("rb") as attempt:
            attempt.seek(start)
            if PACKING.encode() not in attempt.read():
                raise
        with log.open("a") as out:
            out.write("fabric-bench: the build failed while packing the SIF, after every step of the "
                      "recipe had passed: building once more\n")
        run_logged(argv, log, what, cwd=stack.REPO, stamped=True)


# podman's own default rlimits (nofile, nproc) are above what a host without CAP_SYS_RESOURCE
# lets runc set ("error setting rlimit type 6/7"): builds (containers.conf) and runs
# (launch.runtimes, --ulimit) ask for these instead
PODMAN_ULIMITS = ("nofile=16384:16384", "nproc=16384:16384")


def _podman_env() -> dict[str, str]:
    """podman on these hosts: runc (crun refuses the hybrid cgroup host) and
    ulimits that need no CAP_SYS_RESOURCE (see ../shared/ENVIRONMENT.md)."""
    conf = cache_dir() / "podman-containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('[engine]\nruntime = "runc"\n[containers]\n'
                    f'default_ulimits = {json.dumps(list(PODMAN_ULIMITS))}\n')
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
        # a SIF is not a bare squashfs (its root filesystem sits at an offset): apptainer unpacks it
        run_logged([runtime_binary("apptainer"), "build", "--sandbox", f"{work}/rootfs", str(sif)], log,
                    "unpacking base.sif")
        tar = subprocess.Popen(["tar", "-C", f"{work}/rootfs", "-c", "."], stdout=subprocess.PIPE)
        run_logged([binary, "import", "-", stack.BASE_IMAGE_TAG], log, "podman import of the base",
                    stdin=tar.stdout, env=env)
        tar.wait()
    return subprocess.run([binary, "image", "inspect", "--format", "{{.Id}}", stack.BASE_IMAGE_TAG],
                          capture_output=True, text=True, env=env).stdout.strip()


def _build_podman(binary: str, dockerfile: Path, name: str, binds: list[str],
                  log: Path, tag_as: str = "", target: str = "") -> tuple[str, str, int]:
    env = _podman_env()
    tag = tag_as or f"localhost/fabric-bench:{name}"
    argv = [binary, "build", "--network=host", "-f", str(dockerfile), "-t", tag]
    if target:
        argv += ["--target", target]
    for bind in binds:
        argv += ["-v", f"{bind}:ro"]
    run_logged([*argv, str(stack.REPO)], log, f"podman build of {tag}", env=env, stamped=True)
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


def rebuild(entry: dict, into: Path, progress: Progress = print) -> Path:
    """Build a recorded apptainer image once more from the recipe its build wrote
    (CACHE/images/recipes/<name>/image.def) with the same binds, into `into`: nothing is
    recorded and the cache is untouched (`image verify --rebuild`, containers/manifest.py)."""
    if entry["runtime"] != "apptainer":
        raise BuildError("rebuild verification compares SIFs: apptainer images only")
    name = Path(entry["image"]).name.removesuffix(".sif")
    definition = cache_dir() / "images" / "recipes" / name / "image.def"
    if not definition.is_file():
        raise BuildError(f"the recipe of {name} is gone ({definition}); build it again first")
    log = _new_log(f"rebuild-{name}")
    plan = _prepare(entry["flavour"], "apptainer", entry.get("base", "site"), log, progress)
    target = Path(into) / f"{name}.sif"
    progress(f"rebuilding {name} into {into} (log: {log})")
    _build_apptainer(runtime_binary("apptainer"), definition, target, list(plan.binds), log, test=False)
    return target
