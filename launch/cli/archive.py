"""`fabric-bench archive DIR --output FILE` and `fabric-bench replay ARCHIVE`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from launch.console import console as make_console
from launch.shapes import terminal
from launch.trust import ArchiveLimits


def archive(
    directory: Path = typer.Argument(..., help="a run directory (RESULTS/<run_id>) or a sweep directory"),
    output: Path = typer.Option(..., help="the .tar.gz to write"),
    site: Optional[Path] = typer.Option(None, help="site file the runs used (carried in config/)"),
    experiment: Optional[Path] = typer.Option(None, help="experiment file of the sweep (carried in config/)"),
    system_name: Optional[str] = typer.Option(None, help="name of the system description (default: host name)"),
    submitter: str = typer.Option("", help="submitter field of the system description"),
    sign_key: Optional[Path] = typer.Option(
        None, help="sign the manifest with this OpenSSH private key (make one: ssh-keygen -t ed25519 -f site.key -N '')"
    ),
):
    """Archive a run or sweep with its stack into one tar.gz with a manifest.

    Carries the results, image digest and inspect output, rendered recipes and their
    inputs, pip freeze and MPI/UCX/libfabric/NCCL versions, the host probe, site and
    experiment files, an MLPerf-style system description, and the sha256 of every member.

    Example: fabric-bench archive sweeps/resnet50-ib --output resnet50-ib.tar.gz --site site.toml --sign-key site.key
    """
    from launch.provenance import archive as archives

    with make_console(stderr=True).status("collecting results, stack and host facts"):
        members = archives.collect(
            directory, site=site, experiment=experiment, system_name=system_name, submitter=submitter
        )
        manifest = archives.write(members, output, sign_key)
    print(
        f"{output}: {len(manifest['members'])} members, {output.stat().st_size} bytes"
        + (f", signed with {sign_key}" if sign_key else ", unsigned")
    )


def replay(
    archive_file: Path = typer.Argument(..., metavar="ARCHIVE", help="an archive from `fabric-bench archive`"),
    results: Path = typer.Option(Path("results"), help="directory for the new results"),
    site: Optional[Path] = typer.Option(None, help="this site's config (TOML)"),
    allow_image_mismatch: bool = typer.Option(False, help="replay even if an image's digest differs (warns)"),
    timeout: Optional[float] = typer.Option(None, help="kill a run after this many seconds"),
    dry_run: bool = typer.Option(False, help="verify the archive, show every value it brings to the run; run nothing"),
    accept_env: list[str] = typer.Option(
        [], help="a variable outside the allow-list the archive may set (repeatable; its value may hold no path)"
    ),
    allowed_signers: Optional[Path] = typer.Option(
        None, help="OpenSSH allowed-signers file: the keys this site trusts"
    ),
    require_signed: bool = typer.Option(False, help="refuse an archive not signed by a key in --allowed-signers"),
    image: Optional[str] = typer.Option(
        None,
        help="this site's copy of the archive's image (a path or reference, e.g. pulled by "
        "`image pull`); its digest must be the recorded one. The archive's image is never run",
    ),
    runtime: Optional[str] = typer.Option(
        None,
        help="this site's runtime for --image (default: the site file's; apptainer for an image file; "
        "never the archive's); host: replay on this host's software",
    ),
    fabric: Optional[str] = typer.Option(None, help="replay on this site's fabric instead of the archive's"),
    hostfile: Optional[Path] = typer.Option(
        None, help="this site's mpirun hostfile, for runs that named one (a path from the archive is never used)"
    ),
):
    """Re-run an archive's runs here; new results name their original (replay_of).

    Same parameters and argv shape, in this site's image (--image: its digest is checked
    against the recorded one). An archive is another site's data, never its code: its
    variables pass only by exact name from an allow-list, each value of its shape (others
    only with --accept-env NAME; those that run, load or write what they name never), its
    fields are type-checked, a path or image it names is never read or run (this site names
    its own: --image, --runtime, --hostfile), and a signature that does not verify is
    refused. Read limits: {limits}. --dry-run verifies the archive and shows every value it
    brings, each variable with its verdict, each field replaced or refused and why, and the
    command each run would start.

    Example: fabric-bench replay site-a.tar.gz --allowed-signers trusted --require-signed --results replays/
    """
    from launch.provenance import archive as archives
    from launch.runs import replay as replays
    from launch.results.result import as_result
    from launch.ranks.runtimes import HOST
    from launch.site.config import Site, load_site

    here = load_site(site) if site else Site.default()
    if runtime is None and site and here.runtime != HOST:
        runtime, runtime_from = here.runtime, f"the site file {site}"
    else:
        runtime_from = "--runtime"
    verified = archives.read(archive_file)
    print(terminal(f"archive {archive_file}: {verified.provenance(allowed_signers, require_signed).line()}"))
    planned = replays.plan(
        verified,
        allow_image_mismatch,
        tuple(accept_env),
        image=image,
        fabric=fabric,
        refuse_now=not dry_run,
        hostfile=str(hostfile) if hostfile else None,
        runtime=runtime,
        runtime_from=runtime_from,
    )
    for item in planned:
        spec = item.spec
        placed = (
            "runtime=- image=refused"
            if item.refused
            else f"runtime={spec.runtime}{' image=' + spec.image if spec.image else ''}"
        )
        print(
            terminal(
                f"{as_result(item.original).run_id}: {spec.framework} {spec.engine} {spec.model} x{spec.ranks} "
                f"fabric={spec.fabric or '-'} launcher={spec.launcher} {placed}"
            )
        )
        if dry_run:
            for line in replays.shown(item, tuple(accept_env)):
                print(f"  {terminal(line)}")
        else:
            _warn(item.warnings)
    if dry_run:
        for item in planned:  # each field was shown with its verdict; now the first that fails is the error
            replays.refuse_foreign(
                item.foreign or item.spec,
                tuple(accept_env),
                f"result {as_result(item.original).run_id}",
                hostfile_here=hostfile is not None,
                image_here=not item.refused,
            )
        commands = [(item, *replays.command_of(item, results, here)) for item in planned]  # may refuse too
        for item in planned:  # after any refusal, whose one line is then all stderr holds
            _warn(item.warnings)
        for item, argv, script in commands:
            print(terminal(f"{as_result(item.original).run_id} would start: {shlex.join(argv)}"))
            for line in (script or "").splitlines():
                print(f"    {terminal(line)}")
        print(f"archive verified: {len(verified.members)} members; {len(planned)} runs would be replayed")
        return
    from launch.ranks.interrupt import stoppable_command

    with stoppable_command():
        outputs = replays.run_all(verified, planned, results, here, timeout=timeout)
    from launch.schema import at
    from launch.results.result import fields_of

    ran = [fields_of(result) for result in outputs]
    for fields in ran:
        print(terminal(f"{fields.run_id} (replay of {at(fields, 'replay_of.run_id')}): {fields.status}"))
    if any(fields.status != "ok" for fields in ran):
        raise typer.Exit(1)


replay.__doc__ = (replay.__doc__ or "").format(limits=ArchiveLimits().describe())


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"  warning: {terminal(warning)}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("archive")(archive)
    app.command("replay")(replay)
