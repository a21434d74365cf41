"""`fabric-bench site init|show`: write a site file from the probe, validate and print one."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import typer

from launch.errors import UsageError
from launch.site import load_site, site_from_probe, site_to_toml

site_app = typer.Typer(help="Site configuration (site.toml): runtime, launcher, scheduler, fabrics.",
                       no_args_is_help=True)


@site_app.command("init")
def init(output: Path = typer.Option(Path("site.toml"), "--output", "-o", help="file to write"),
         force: bool = typer.Option(False, help="overwrite an existing file")):
    """Write a site file describing this host, from `fabric-bench probe`.

    Example: fabric-bench site init --output site.toml
    """
    from launch.probe import collect

    if output.exists() and not force:
        raise UsageError(f"{output}: exists; pass --force to overwrite")
    site = site_from_probe(collect())
    header = ("fabric-bench site file, written by `fabric-bench site init` from this host's probe.\n"
              "Edit scheduler defaults, binds, env and modules for your cluster.")
    try:
        output.write_text(site_to_toml(site, header))
    except OSError as exc:
        raise UsageError(f"{output}: cannot write: {exc.strerror}") from None
    load_site(output)   # what we write must load
    print(f"wrote {output}")


@site_app.command("show")
def show(site: Path = typer.Option(..., "--site", help="site file to validate and print"),
         json_output: bool = typer.Option(False, "--json", help="machine-readable JSON")):
    """Validate a site file and print what it means.

    Example: fabric-bench site show --site site.toml
    """
    loaded = load_site(site)
    data = dataclasses.asdict(loaded)
    data["path"] = str(loaded.path)
    data["scheduler"]["time_limit"] = loaded.scheduler.slurm_time()
    if json_output:
        print(json.dumps(data, indent=2))
        return
    print(f"site {site}: valid")
    print(site_to_toml(loaded), end="")


def register(app: typer.Typer) -> None:
    app.add_typer(site_app, name="site")
