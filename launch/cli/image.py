"""`fabric-bench image render|build|inspect|list`: the images of containers/."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from containers.fabrics import FABRICS
from launch.console import console as make_console
from launch.errors import UsageError

image_app = typer.Typer(help="Render, build and inspect the per-fabric images (containers/).",
                        no_args_is_help=True)
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
    files = {f"stack-{flavour}.def": stack_recipe.definition, "Dockerfile.stack": stack_recipe.dockerfile,
             f"{fabric}-{flavour}.def": rendered.definition, "Dockerfile": rendered.dockerfile}
    if stack_recipe.devel_template:
        files[f"stack-{flavour}-devel.def"] = stack_recipe.devel_definition
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write to {out}: {exc.strerror}") from None
    print("\n".join(str(out / name) for name in files))
    print(f"recipe hash {rendered.recipe_hash} (stack {stack_recipe.recipe_hash})")


@image_app.command()
def build(
    fabric: str = typer.Option("ethernet", help=FABRIC_HELP),
    flavour: str = typer.Option("cpu", help=FLAVOUR_HELP),
    runtime: str = typer.Option("apptainer", help="apptainer | podman"),
    base: str = typer.Option("site", help="cuda: site (nvidia/cuda images) | local (Debian + CUDA wheels, "
                                          "the rehearsal here)"),
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
    print(json.dumps({"image": record.image, "sha256": record.sha256, "size_bytes": record.size_bytes,
                      "stack_digest": record.stack_digest, "stack_image": record.stack_image,
                      "build_seconds": record.build_seconds, "stages": record.stages, "log": record.log},
                     indent=2))


@image_app.command()
def inspect(image: Path = typer.Argument(..., help="a built .sif")):
    """Print a built image's labels (fabric, flavour, versions, commit, recipe hash) as JSON.

    Example: fabric-bench image inspect ~/.cache/fabric-bench/images/ethernet-cpu-*.sif
    """
    from containers import build as builder
    try:
        print(json.dumps(builder.inspect(str(image)), indent=2, sort_keys=True))
    except builder.BuildError as exc:
        raise _usage(exc) from None


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
        raise UsageError(f"no {fabric}/{flavour} image built with {runtime}; "
                         f"run: make image FABRIC={fabric} FLAVOUR={flavour} RUNTIME={runtime}")
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
        table.add_row(e["fabric"], e["flavour"], e["runtime"], f"{e['size_bytes'] / 2**20:.0f}",
                      e["sha256"][:12], (e.get("stack_digest") or "")[:12], e["built_at"][:19], e["image"])
    make_console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
