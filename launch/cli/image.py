"""`fabric-bench image render|build|inspect|list|path|push|pull|sbom`: the images of containers/."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from containers.fabrics import FABRICS
from launch.console import console as make_console
from launch.errors import UsageError

image_app = typer.Typer(help="Render, build and inspect the per-fabric images (containers/).", no_args_is_help=True)
FABRIC_HELP = " | ".join(FABRICS)
FLAVOUR_HELP = "cuda | cpu (the site stack, CUDA off; ~35 min cold) | cpu-debian (Debian's stack; minutes)"


def _usage(exc: Exception) -> UsageError:
    return UsageError(str(exc))


@image_app.command()
def render(
    fabric: str = typer.Option(..., help=FABRIC_HELP),
    flavour: str = typer.Option(..., help=FLAVOUR_HELP),
    out: Path = typer.Option(..., help="directory for the .def files and the Dockerfiles"),
    base: str = typer.Option("site", help="cuda: site (nvidia/cuda images) | local (this machine's rehearsal base)"),
    cpu_base: str = typer.Option("", help="cpu/Apptainer: the local base .sif (default: base.sif)"),
):
    """Write the stack image's recipe (OUT/stack-<flavour>[-devel].def, OUT/Dockerfile.stack)
    and the fabric image's, built FROM it (OUT/<fabric>-<flavour>.def, OUT/Dockerfile).

    Example: fabric-bench image render --fabric infiniband --flavour cuda --out build/ib
    """
    from containers import recipe

    try:
        rendered = recipe.render(fabric, flavour, base=base)
        stack_recipe = recipe.render_stack(flavour, base=base, cpu_base=cpu_base)
    except ValueError as exc:
        raise _usage(exc) from None
    files = {
        f"stack-{flavour}.def": stack_recipe.definition,
        "Dockerfile.stack": stack_recipe.dockerfile,
        f"{fabric}-{flavour}.def": rendered.definition,
        "Dockerfile": rendered.dockerfile,
    }
    if stack_recipe.devel_template:
        files[f"stack-{flavour}-devel.def"] = stack_recipe.devel_definition
    from containers.files import write_atomic

    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_atomic(out / name, text)  # a link planted at a fixed name is replaced, never followed
    except OSError as exc:
        raise UsageError(f"cannot write to {out}: {exc.strerror}") from None
    print("\n".join(str(out / name) for name in files))
    print(f"recipe hash {rendered.recipe_hash} (stack {stack_recipe.recipe_hash})")


@image_app.command()
def build(
    fabric: str = typer.Option("ethernet", help=FABRIC_HELP),
    flavour: str = typer.Option("cpu", help=FLAVOUR_HELP),
    runtime: str = typer.Option("apptainer", help="apptainer | podman"),
    base: str = typer.Option(
        "site", help="cuda: site (nvidia/cuda images) | local (Debian + CUDA wheels, the rehearsal here)"
    ),
):
    """Build (or reuse, when no input changed) the flavour's stack image when missing, then
    the fabric image FROM it; record digests and logs.

    Example: fabric-bench image build --fabric ethernet --flavour cpu --runtime apptainer
    """
    from containers import build as builder

    console = make_console(stderr=True)
    try:
        with console.status("building image") as status:

            def progress(line: str) -> None:
                status.update(line)
                console.log(line)

            record = builder.build(fabric, flavour, runtime, base=base, progress=progress)
    except builder.BuildError as exc:
        raise _usage(exc) from None
    print(
        json.dumps(
            {
                "image": record.image,
                "sha256": record.sha256,
                "size_bytes": record.size_bytes,
                "stack_digest": record.stack_digest,
                "stack_image": record.stack_image,
                "build_seconds": record.build_seconds,
                "stages": record.stages,
                "log": record.log,
            },
            indent=2,
        )
    )


@image_app.command()
def inspect(
    image: Path = typer.Argument(..., help="a built .sif"),
    sbom: bool = typer.Option(
        False, "--sbom", help="also show the image's bill of materials (written now when it has none)"
    ),
):
    """Print a built image's labels (fabric, flavour, versions, commit, recipe hash) as JSON;
    with --sbom, its SBOM's summary (communication stack, compiler, base, Python packages) too.

    Example: fabric-bench image inspect --sbom ~/.cache/fabric-bench/images/ethernet-cpu-*.sif
    """
    from containers import build as builder

    try:
        labels = builder.inspect(str(image))
        if not sbom:
            print(json.dumps(labels, indent=2, sort_keys=True))
            return
        from containers import sbom as boms

        path = boms.ensure(str(image))
        summary = boms.read(path.read_bytes())
    except builder.BuildError as exc:
        raise _usage(exc) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(
        json.dumps(
            {
                "labels": labels,
                "sbom": {
                    "path": str(path),
                    "image_digest": summary.image_digest,
                    "stack_digest": summary.stack_digest,
                    "base_image_digest": summary.base_digest,
                    "compiler": summary.compiler,
                    "stack": summary.stack,
                    "python": summary.python,
                    "os_packages": len(summary.os),
                },
            },
            indent=2,
            sort_keys=True,
        )
    )


def _site_registry(site: Path | None):
    if site is None:
        return None
    from launch.site.config import load_site

    return load_site(site).registry


@image_app.command()
def push(
    image: str = typer.Argument(..., help="a .sif (apptainer) or a local image name (podman)"),
    to: str = typer.Option(
        "", help="HOST[:PORT]/NAME:TAG (default: the site file's registry url + the image's fabric-flavour)"
    ),
    runtime: str = typer.Option("apptainer", help="apptainer (ORAS artifact) | podman"),
    site: Path = typer.Option(None, help="site file whose [registry] names url and references"),
    reference_file: Optional[Path] = typer.Option(
        None, help="add the pushed image to this reference file (pinned reference, digest, labels, SBOM)"
    ),
    sign_key: Path = typer.Option(None, help="sign the reference file with this OpenSSH key"),
    insecure: bool = typer.Option(False, help="plain HTTP (a registry on this host only)"),
    podman_store: Path = typer.Option(None, help="podman: an image store of its own (--root/--runroot under it)"),
):
    """Push an image to an OCI registry; print the reference pinned by digest.

    Logins are the runtime's own (`apptainer registry login`, `podman login`).

    Example: fabric-bench image push stack.sif --to 127.0.0.1:5000/fb/stack-cpu-debian:v1
    """
    from containers import build as builder
    from containers import oci
    from launch.provenance import images

    registry = _site_registry(site)
    insecure = insecure or bool(registry and registry.insecure)
    reference_file = reference_file or (registry.references if registry else None)
    try:
        labels = oci.labels(image, runtime, podman_store)
        if not to:
            if registry is None:
                raise UsageError("name the target: --to HOST/NAME:TAG, or --site with a [registry] url")
            to = (
                f"{registry.url}/{labels.get('org.fabric-bench.fabric', 'image')}-"
                f"{labels.get('org.fabric-bench.flavour', 'unknown')}:"
                f"{labels.get('org.fabric-bench.recipe-hash', 'latest')[:16]}"
            )
        pushed = oci.push(image, to, runtime, insecure=insecure, store=podman_store)
        sbom_text = ""
        if reference_file:
            from containers import sbom as boms

            try:
                sbom_text = boms.ensure(image, runtime, podman_store).read_text()
            except builder.BuildError as exc:  # an image without a shell cannot list its software
                print(f"note: the reference carries no SBOM: {exc}", file=sys.stderr)
            images.write_references(
                reference_file,
                images.reference_entry(pushed.reference, runtime, pushed.image_digest, labels, sbom_text),
                sign_key,
            )
    except builder.BuildError as exc:
        raise _usage(exc) from None
    print(
        json.dumps(
            {
                "reference": pushed.reference,
                "manifest_digest": pushed.manifest_digest,
                "image_digest": pushed.image_digest,
                "reference_file": str(reference_file) if reference_file else None,
                "signed": bool(reference_file and sign_key),
            },
            indent=2,
        )
    )


@image_app.command()
def pull(
    reference: str = typer.Argument(..., help="HOST[:PORT]/NAME@sha256:MANIFEST (pinned by digest)"),
    out: Path = typer.Option(None, help="apptainer: where the .sif goes"),
    runtime: str = typer.Option("apptainer", help="apptainer | podman"),
    expect_digest: str = typer.Option("", help="the image digest it must have (sha256:...)"),
    archive: Path = typer.Option(None, help="check against what this archive recorded for its image"),
    reference_file: Path = typer.Option(None, help="check against this (signed) reference file"),
    allowed_signers: Path = typer.Option(
        None, help="OpenSSH allowed-signers: the reference file and archive must be signed by one of them"
    ),
    site: Path = typer.Option(None, help="site file whose [registry] names references and allowed_signers"),
    tag: str = typer.Option("", help="podman: also tag the pulled image with this local name"),
    insecure: bool = typer.Option(False, help="plain HTTP (a registry on this host only)"),
    podman_store: Path = typer.Option(None, help="podman: an image store of its own (--root/--runroot under it)"),
):
    """Pull an image pinned by digest, then check it: its digest, and (from a reference file or an
    archive) its stack digest, recipe hash and fabric/flavour labels, and the signature of what
    named them. An image that fails a check is removed and the command exits 2.

    Example: fabric-bench image pull 127.0.0.1:5000/fb/stack@sha256:... --out stack.sif --archive run.tar.gz
    """
    from containers import build as builder
    from containers import oci
    from launch.provenance import archive as archives
    from launch.provenance import images

    registry = _site_registry(site)
    if registry:
        insecure = insecure or registry.insecure
        reference_file = reference_file or registry.references
        allowed_signers = allowed_signers or registry.allowed_signers
    try:
        ref = oci.parse(reference)
        ref.by_digest()
        expectations = []
        if reference_file:
            expectations.append(
                images.from_references(
                    reference_file, reference, allowed_signers, require_signed=allowed_signers is not None
                )
            )
        if expect_digest:
            expectations.append(images.Expectation("--expect-digest", images.normal(expect_digest)))
        loaded = archives.read(archive) if archive else None
        if loaded is not None:
            print(f"archive: {loaded.provenance(allowed_signers, require_signed=allowed_signers is not None).line()}")
        if not expectations and loaded is None:
            raise UsageError(
                "nothing to check the image against: give --expect-digest, --archive or "
                "--reference-file (or a --site whose [registry] names references)"
            )
        pulled = oci.pull(reference, runtime, out, insecure=insecure, local_name=tag, store=podman_store)
        if loaded is not None:
            expectations.append(images.from_archive(loaded, pulled.image_digest))
        labels = oci.labels(pulled.image, runtime, podman_store)
        problems = [p for e in expectations for p in images.check(pulled.image_digest, labels, e)]
        if problems:
            oci.discard(pulled.image, runtime, podman_store)
            raise UsageError(
                f"pulled image refused and removed: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            )
        sbom_path = _keep_sbom(pulled, runtime, expectations)
    except builder.BuildError as exc:
        raise _usage(exc) from None
    print(
        json.dumps(
            {
                "image": pulled.image,
                "image_digest": pulled.image_digest,
                "reference": pulled.reference,
                "checked_against": [e.where for e in expectations],
                "sbom": sbom_path,
            },
            indent=2,
        )
    )


def _keep_sbom(pulled, runtime: str, expectations: list) -> str | None:
    """The SBOM that came with the expectation, beside the pulled image when it describes it: written
    under a new name and renamed into place (containers.files.write_atomic), so a link planted at its
    fixed name beside --out is replaced, never written through."""
    from containers import sbom as boms
    from containers.files import write_atomic

    for expected in expectations:
        if not expected.sbom:
            continue
        try:
            summary = boms.read(expected.sbom)
        except boms.SbomError as exc:
            raise UsageError(f"{expected.where}: its SBOM is refused: {exc}") from None
        if summary.image_digest != pulled.image_digest:
            raise UsageError(
                f"{expected.where}: its SBOM describes {summary.image_digest[:19]}, "
                f"not the pulled {pulled.image_digest[:19]}"
            )
        target = boms.path_for(pulled.image, runtime, pulled.image_digest)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, expected.sbom)
        except OSError as exc:
            raise UsageError(f"cannot write the SBOM {target}: {exc.strerror or exc}") from None
        return str(target)
    return None


@image_app.command("path")
def image_path(
    fabric: str = typer.Option("ethernet", help=FABRIC_HELP),
    flavour: str = typer.Option("cpu", help=FLAVOUR_HELP),
    runtime: str = typer.Option("apptainer", help="apptainer | podman"),
):
    """Print the path (apptainer) or name (podman) of the built image of (fabric, flavour).

    Example: fabric-bench run --runtime apptainer --image "$(fabric-bench image path --fabric ethernet)" ...
    """
    from containers import build as builder

    entry = builder.find(fabric, flavour, runtime)
    if entry is None:
        raise UsageError(
            f"no {fabric}/{flavour} image built with {runtime}; "
            f"run: make image FABRIC={fabric} FLAVOUR={flavour} RUNTIME={runtime}"
        )
    print(entry["image"])


@image_app.command("list")
def list_images(as_json: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """List recorded images (CACHE/images/registry.json).

    Example: fabric-bench image list --json
    """
    from containers import build as builder

    entries = builder.registry()
    if as_json:
        print(json.dumps(entries, indent=2))
        return
    table = Table(title=f"images ({builder.registry_path()})")
    for column in ("fabric", "flavour", "runtime", "size_mb", "sha256", "stack", "built_at", "image"):
        table.add_column(column)
    for e in entries:
        table.add_row(
            e["fabric"],
            e["flavour"],
            e["runtime"],
            f"{e['size_bytes'] / 2**20:.0f}",
            e["sha256"][:12],
            (e.get("stack_digest") or "")[:12],
            e["built_at"][:19],
            e["image"],
        )
    make_console().print(table)


@image_app.command()
def verify(
    image: Path = typer.Argument(..., help="a built .sif (recorded in CACHE/images/registry.json)"),
    rebuild: bool = typer.Option(False, "--rebuild", help="build it once more from its recorded recipe"),
    against: Path = typer.Option(
        None,
        help="compare with this .sif instead of rebuilding (an air-gapped copy), "
        "or with the content manifest (.json) another site saved with --save",
    ),
    save: Path = typer.Option(None, help="write both content manifests (JSON) into this folder"),
):
    """Compare an image's content manifest (every file's path, mode and sha256; no times) with a
    rebuild's, or with another copy's: the identical share and the differing files by cause.

    Example: fabric-bench image verify --rebuild ~/.cache/fabric-bench/images/stack-cpu-debian-*.sif
    Example: fabric-bench image verify stack.sif --against site-a/first.json
    """
    import tempfile

    from containers import build as builder
    from containers import manifest

    if not rebuild and against is None:
        raise UsageError("say what to compare with: --rebuild, or --against OTHER.sif")
    console = make_console(stderr=True)
    try:
        # another site's manifest is checked before minutes go into unpacking this image
        saved = manifest.load(against) if against is not None and against.suffix == ".json" and not rebuild else None
        first = manifest.of_sif(image)
        with tempfile.TemporaryDirectory(prefix="fabric-bench-rebuild.", dir=Path(image).resolve().parent) as work:
            if rebuild:
                entry = next(
                    (e for e in builder.registry() if Path(e["image"]).resolve() == Path(image).resolve()), None
                )
                if entry is None:
                    raise UsageError(f"{image} is not recorded in {builder.registry_path()}: nothing to rebuild from")
                with console.status("rebuilding") as status:

                    def progress(line: str) -> None:
                        status.update(line)
                        console.log(line)

                    other = builder.rebuild(entry, Path(work), progress=progress)
            else:
                other = against
            second = saved if saved is not None else manifest.of_sif(other)
    except builder.BuildError as exc:
        raise _usage(exc) from None
    if save:
        save.mkdir(parents=True, exist_ok=True)
        manifest.save(first, save / "first.json")
        manifest.save(second, save / "second.json")
    result = manifest.compare(first, second)
    print("\n".join(result.lines()))


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
