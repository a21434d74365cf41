"""`fabric-bench site init|show`: write a site file from the probe, validate and print one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import typer

from launch import shapes

from launch.errors import UsageError
from launch.ranks.launchers import SRUN
from launch.site.config import FabricSite, Scheduler, Site, load_site, site_from_probe, site_to_toml

site_app = typer.Typer(
    help="Site configuration (site.toml): runtime, launcher, scheduler, fabrics.", no_args_is_help=True
)


@site_app.command("init")
def init(
    output: Path = typer.Option(Path("site.toml"), "--output", "-o", help="file to write"),
    force: bool = typer.Option(False, help="overwrite an existing file"),
    emulated: Optional[str] = typer.Option(
        None, help="describe the running emulated Slurm cluster of this name (`emulate up --slurm`) instead"
    ),
):
    """Write a site file describing this host, from `fabric-bench probe`.

    Example: fabric-bench site init --output site.toml
    """
    from launch.site.probe import collect

    if output.exists() and not force:
        raise UsageError(f"{output}: exists; pass --force to overwrite")
    site = site_from_probe(collect())
    header = (
        "fabric-bench site file, written by `fabric-bench site init` from this host's probe.\n"
        "Edit scheduler defaults, binds, env and modules for your cluster."
    )
    if emulated:
        site, header = emulated_site(site, emulated)
    try:
        output.write_text(site_to_toml(site, header))
    except OSError as exc:
        raise UsageError(f"{output}: cannot write: {exc.strerror}") from None
    load_site(output)  # what we write must load
    print(f"wrote {output}")


@site_app.command("show")
def show(
    site: Path = typer.Option(..., "--site", help="site file to validate and print"),
    json_output: bool = typer.Option(False, "--json", help="machine-readable JSON"),
):
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


def emulated_site(probed: Site, name: str) -> tuple[Site, str]:
    """The site of a running emulated Slurm cluster: srun on partition emu, ethernet on every
    node's shaped interface at its rate, rank 0's DDP address on that interface."""
    from launch.fleet import emulate

    found = emulate.cluster_named(name)
    if found is None or not found.slurm:
        raise UsageError(
            f"no emulated Slurm cluster {name!r} runs; start one with `fabric-bench emulate up --slurm --name {name}`"
        )
    rate = found.rate_bit_s / 1e9 if found.rate_bit_s else None
    site = dataclasses.replace(
        probed,
        launcher=SRUN.name,
        scheduler=Scheduler(partition=shapes.slurm_name("partition", "emu")),
        env={"FABRIC_BENCH_MASTER_IFNAME": emulate.IFNAME},
        fabrics={"ethernet": FabricSite(interface=emulate.IFNAME, link_gbit_s=rate)},
    )
    header = (
        f"fabric-bench site file of the emulated Slurm cluster {name!r} ({found.nodes} nodes), written by\n"
        "`fabric-bench site init --emulated`. Slurm's clients need\n"
        f"export SLURM_CONF={emulate.slurm_nodes.conf_path(name)}"
    )
    return site, header


def register(app: typer.Typer) -> None:
    app.add_typer(site_app, name="site")
