"""`fabric-bench publish ARCHIVE|DIR REGISTRY[/REPO]`: signed results to an OCI registry (launch.sharing)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from launch.console import console as make_console
from launch.errors import UsageError
from launch.shapes import rich_text, terminal


def publish(
    source: Path = typer.Argument(
        ...,
        metavar="ARCHIVE|DIR",
        help="a signed archive (fabric-bench archive --sign-key), or a run or sweep directory to archive and sign",
    ),
    target: str = typer.Argument(
        ..., metavar="REGISTRY[/REPO]", help="where to push (REPO defaults to fabric-bench/results)"
    ),
    sign_key: Optional[Path] = typer.Option(
        None, help="with a directory: sign its archive with this OpenSSH private key (required then)"
    ),
    site: Optional[Path] = typer.Option(None, help="with a directory: site file the runs used (carried in config/)"),
    experiment: Optional[Path] = typer.Option(None, help="with a directory: experiment file of the sweep"),
    system_name: Optional[str] = typer.Option(
        None, help="with a directory: the site's name, its system description's (default: host name)"
    ),
    submitter: str = typer.Option("", help="with a directory: submitter field of the system description"),
    keep_archive: Optional[Path] = typer.Option(None, help="with a directory: also keep the signed archive here"),
    insecure: bool = typer.Option(False, help="plain HTTP to a registry not on this host (this host's always is)"),
) -> None:
    """Publish signed results to an OCI registry as an OCI artifact; prints its pinned reference.

    The artifact (ORAS convention, artifactType application/vnd.fabric-bench.results.v1+tar) holds
    the archive and its system description as two layers, with annotations a reader filters on:
    site, fabric, kind, model or size, nodes x ranks, stack digest, bundle version, date, signing
    key. An archive must be signed; a directory is archived and signed with --sign-key first.
    Another site pulls it with `fabric-bench results pull`.

    Examples:
      fabric-bench publish study-a.tar.gz registry.example.org/hpc/fabric-results
      fabric-bench publish results/sweeps/cpu-small 127.0.0.1:5000 --sign-key site-a.key --system-name site-a
    """
    from launch.sharing import annotations as notes
    from launch.sharing import publish as publishing

    with_directory = {
        "--site": site,
        "--experiment": experiment,
        "--system-name": system_name,
        "--submitter": submitter,
        "--keep-archive": keep_archive,
    }
    with make_console(stderr=True).status(rich_text(f"publishing {source} to {target}")):
        if source.is_dir():
            if sign_key is None:
                raise UsageError("publishing a directory needs --sign-key KEY: only signed results are published")
            published = publishing.archive_and_publish(
                source,
                target,
                sign_key,
                site=site,
                experiment=experiment,
                system_name=system_name,
                submitter=submitter,
                keep=keep_archive,
                insecure=insecure,
            )
        else:
            given = [name for name, value in {**with_directory, "--sign-key": sign_key}.items() if value]
            if given:
                raise UsageError(f"{given[0]} is for a directory; {source} is an archive (signed already)")
            published = publishing.publish(source, target, insecure)
    described = published.annotations
    print(
        terminal(
            f"published {described.get(notes.RUNS)} results of site {described.get(notes.SITE)} "
            f"as {published.tag} (archive {published.archive_digest})"
        )
    )
    print(terminal(published.reference))


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
