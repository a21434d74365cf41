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

The driver is this module; what it builds with are modules of their own:
containers.build_inputs (base, wheelhouse, Horovod wheel, input hashes),
containers.build_backends (apptainer, podman) and containers.image_store (the
record of every image built here).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from containers import recipe as recipes
from containers import sources, stack
from containers.build_backends import (
    PACKING,
    PODMAN_ULIMITS,
    SQUASHFS_ARGS,
    build_apptainer,  # noqa: F401
    build_podman,
    inspect,
    podman_base,
    podman_env,
)
from containers.build_inputs import base_image, hash_files, horovod_wheel, image_sha256, wheelhouse  # noqa: F401
from containers.files import sha256_bytes, write_json_atomic  # noqa: F401
from containers.fabrics import FABRICS
from containers.host import (
    RUNTIMES,
    BuildError,
    Progress,
    cache_dir,
    debian_mirror,
    debootstrap_root,  # noqa: F401
    free_gib,
    run_logged,
    runtime_binary,
)  # BuildError, cache_dir, debian_mirror: the driver's API too
from containers.image_store import ImageRecord, find, record, registry, registry_path  # noqa: F401


def check_choice(kind: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BuildError(f"unknown {kind} {value!r}; choose from {', '.join(choices)}")


# Build --------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What one build needs besides the recipe: binds, input key parts, what it omits."""

    runtime: str
    flavour: str
    base: str  # "site" | "local" (cuda); cpu is always a local Debian base
    binds: tuple[str, ...]
    inputs: dict
    paths: dict  # recipe placeholders -> paths (local bases)
    omit: tuple[str, ...]
    log: Path


def _prepare(flavour: str, runtime: str, base: str, log: Path, progress: Progress) -> Plan:
    binary = runtime_binary(runtime)
    # bench/ is in the stack image; the self-test script is copied into each fabric image
    # too (its %test uses that copy), so only fabric builds depend on it
    inputs: dict = {
        "runtime": runtime,
        "squashfs": SQUASHFS_ARGS,
        "base-kind": base,
        "bundle": hash_files([*stack.REPO.glob("bench/*.py")]),
    }
    binds: list[str] = []
    paths: dict = {}
    omit: tuple[str, ...] = ()
    if flavour in stack.CPU_FLAVOURS:
        if runtime == "apptainer":
            base_sif = base_image(log, progress)
            paths["cpu_base"], inputs["base"] = str(base_sif), image_sha256(base_sif)
        else:
            paths["cpu_base"], inputs["base"] = stack.BASE_IMAGE_TAG, podman_base(binary, log, progress)
        wheels = wheelhouse(log, progress)
        inputs["wheelhouse"] = wheels.name
        binds = [f"{wheels}:{stack.WHEELHOUSE}"]
        if flavour == "cpu":  # cpu-debian fetches no sources: its stack is Debian's packages
            served = _verified_sources(progress)
            inputs["sources"] = (served / "urls.tsv").read_text()
            binds.append(f"{served}:{sources.REHEARSAL}/sources")
    elif base == "local":
        from containers import cudabase

        devel, runtime_base = cudabase.local_bases(log, progress)
        served = _verified_sources(progress)
        inputs["base"] = [image_sha256(devel), image_sha256(runtime_base)]
        inputs["sources"] = (served / "urls.tsv").read_text()
        paths = {"LOCAL_DEVEL_BASE": str(devel), "LOCAL_RUNTIME_BASE": str(runtime_base)}
        omit = sources.omitted()
        binds = [f"{served}:{sources.REHEARSAL}/sources", f"{_ca_bundle_dir()}:{sources.REHEARSAL}/certs"]
        wheels = cache_dir() / "rehearsal-wheels"
        if wheels.is_dir():  # local wheels first (pip.conf of the local base); PyPI for the rest
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
    bundle = Path(
        os.environ.get("SSL_CERT_FILE") or ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    )
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
    return sha256_bytes(json.dumps({**plan.inputs, "recipe": recipe_hash, "extra": extra}, sort_keys=True).encode())[
        :16
    ]


# an Apptainer definition's %labels section, up to the next section
LABELS_SECTION = re.compile(r"^%labels\n.*?(?=^%|\Z)", re.MULTILINE | re.DOTALL)


def _devel_key(plan: Plan, rendered: recipes.Recipe) -> str:
    """The stack's devel stage is keyed on what builds it: its own definition less its labels (the
    bundle commit, the recipe hash), and the inputs less bench/ and the wheelhouse, which only the
    runtime stage takes in. Editing bench/, a label or the runtime stage's packages does not
    rebuild the communication stack (~55 min on 2 cores for cuda)."""
    inputs = {k: v for k, v in plan.inputs.items() if k not in ("bundle", "wheelhouse")}
    builds = LABELS_SECTION.sub("", rendered.devel_template)
    return sha256_bytes(json.dumps({**inputs, "devel": sha256_bytes(builds.encode())}, sort_keys=True).encode())[:16]


def _cached(key: str, runtime: str) -> Optional[dict]:
    entry = next((e for e in registry() if e["input_key"] == key and e["runtime"] == runtime), None)
    if entry and (runtime != "apptainer" or Path(entry["image"]).exists()):
        return entry
    return None


def _devel_stage(
    binary: str, rendered: recipes.Recipe, plan: Plan, recipe_dir: Path, devel_sif: Path, log: Path, progress: Progress
) -> float:
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
    seconds, _ = build_apptainer(binary, recipe_dir / "stack-devel.def", devel_sif, list(plan.binds), log, test=False)
    devel_log = devel_sif.with_suffix(".log")
    shutil.copyfile(log, devel_log)
    write_json_atomic(sidecar, {"seconds": seconds, "log": str(devel_log)})
    return seconds


def _fill(rendered: recipes.Recipe, plan: Plan, **more: str) -> recipes.Recipe:
    return rendered.filled(**{k: v for k, v in plan.paths.items() if k != "cpu_base"}, **more)


def build_stack(
    flavour: str, runtime: str = "apptainer", *, base: str = "site", progress: Progress = print
) -> ImageRecord:
    """Build (or reuse) the stack image of a flavour: the common stack every fabric image
    of the flavour is built FROM (apptainer: stack-devel.sif too)."""
    check_choice("flavour", flavour, stack.FLAVOURS)
    check_choice("base", base, recipes.BASES)
    binary = runtime_binary(runtime)
    log = _new_log(f"stack-{flavour}-{runtime}")
    plan = _prepare(flavour, runtime, base, log, progress)
    rendered = recipes.render_stack(flavour, base=base, cpu_base=plan.paths.get("cpu_base", ""), omit=plan.omit)
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
            devel_sif = images / f"stack-{flavour}-devel-{_devel_key(plan, rendered)}.sif"
            stages["stack-devel"] = _devel_stage(binary, rendered, plan, recipe_dir, devel_sif, log, progress)
            devel_image = str(devel_sif)
        filled = _fill(rendered, plan, STACK_DEVEL_IMAGE=devel_image) if devel_image else rendered
        (recipe_dir / "image.def").write_text(filled.definition)
        (recipe_dir / "Dockerfile").write_text(rendered.dockerfile)
        progress(f"building {name}.sif (log: {log}; {free_gib(log):.1f} GiB free there)")
        seconds, test_seconds = build_apptainer(
            binary, recipe_dir / "image.def", images / f"{name}.sif", list(plan.binds), log
        )
        stages["stack"], stages["stack-test"] = seconds, test_seconds
        image = images / f"{name}.sif"
        digest, size = image_sha256(image), image.stat().st_size
        image_name = str(image)
    else:
        (recipe_dir / "Dockerfile").write_text(rendered.dockerfile)
        started = time.monotonic()
        tag = recipes.stack_tag(flavour)
        if len(rendered_stages := re.findall(r"^FROM .* AS (\S+)$", rendered.dockerfile, re.M)) > 1:
            # the devel stage under its own name: fabric layers that build start FROM it
            build_podman(
                binary,
                recipe_dir / "Dockerfile",
                tag,
                list(plan.binds),
                log,
                tag_as=f"{tag}-{rendered_stages[0]}",
                target=rendered_stages[0],
            )
        image_name, digest, size = build_podman(
            binary, recipe_dir / "Dockerfile", tag, list(plan.binds), log, tag_as=tag
        )
        stages["stack"] = round(time.monotonic() - started, 1)
        devel_image = ""
    entry = ImageRecord(
        "stack",
        flavour,
        runtime,
        image_name,
        digest,
        size,
        key,
        rendered.recipe_hash,
        recipes.bundle_commit(),
        dt.datetime.now(dt.timezone.utc).isoformat(),
        round(sum(stages.values()), 1),
        str(log),
        base=base,
        omitted=list(plan.omit),
        stages=stages,
        devel_image=devel_image,
    )
    record(entry)
    _write_sbom(entry, plan)
    return entry


def build(
    fabric: str, flavour: str, runtime: str = "apptainer", *, base: str = "site", progress: Progress = print
) -> ImageRecord:
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
    key = _key(
        plan, rendered.recipe_hash, extra=stack_entry.sha256 + hash_files([stack.REPO / "containers/image-test.sh"])
    )
    name = f"{fabric}-{flavour}-{key}"
    cached = _cached(key, runtime)
    if cached:
        progress(f"cached: {cached['image']}")
        log.unlink()
        return ImageRecord(**cached)
    filled = _fill(
        rendered,
        plan,
        STACK_IMAGE=stack_entry.image,
        STACK_DIGEST=stack_entry.sha256,
        STACK_DEVEL_IMAGE=stack_entry.devel_image or "",
    )
    images = cache_dir() / "images"
    recipe_dir = images / "recipes" / name
    recipe_dir.mkdir(parents=True, exist_ok=True)
    (recipe_dir / "image.def").write_text(filled.definition)
    dockerfile = rendered.dockerfile.replace(recipes.STACK_DIGEST, stack_entry.sha256)
    (recipe_dir / "Dockerfile").write_text(dockerfile)
    progress(
        f"building {name} with {runtime} FROM the stack {Path(stack_entry.image).name} "
        f"(log: {log}; {free_gib(log):.1f} GiB free there)"
    )
    stages: dict[str, float] = {}
    if runtime == "apptainer":
        # the fabric layer installs OS packages, or builds from the stack's devel image: the plan's
        # binds (sources, wheels) in both stages, whose bases have their mount points
        seconds, test_seconds = build_apptainer(
            binary, recipe_dir / "image.def", images / f"{name}.sif", list(plan.binds), log
        )
        stages["fabric"], stages["fabric-test"] = seconds, test_seconds
        image = images / f"{name}.sif"
        image_name, digest, size = str(image), image_sha256(image), image.stat().st_size
    else:
        started = time.monotonic()
        image_name, digest, size = build_podman(binary, recipe_dir / "Dockerfile", name, list(plan.binds), log)
        stages["fabric"] = round(time.monotonic() - started, 1)
    entry = ImageRecord(
        fabric,
        flavour,
        runtime,
        image_name,
        digest,
        size,
        key,
        rendered.recipe_hash,
        recipes.bundle_commit(),
        dt.datetime.now(dt.timezone.utc).isoformat(),
        round(sum(stages.values()), 1),
        str(log),
        base=base,
        omitted=list(plan.omit),
        stages=stages,
        stack_digest=stack_entry.sha256,
        stack_image=stack_entry.image,
        stack_stages=stack_entry.stages,
    )
    record(entry)
    _write_sbom(entry, plan)
    return entry


def _write_sbom(entry: ImageRecord, plan: Plan) -> None:
    """The built image's bill of materials beside it (containers/sbom.py)."""
    from containers import sbom

    base = plan.inputs.get("base")
    base_digest = base if isinstance(base, str) else ",".join(base or [])
    sbom.write_for(
        entry.image,
        entry.runtime,
        fabric=entry.fabric,
        flavour=entry.flavour,
        image_digest=entry.sha256,
        base_digest=f"sha256:{base_digest.removeprefix('sha256:')}" if base_digest else "",
        stack_digest=entry.stack_digest,
    )


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
    build_apptainer(runtime_binary("apptainer"), definition, target, list(plan.binds), log, test=False)
    return target
