"""`fabric-bench results list|show|export|index|pull`: the results history (launch.results.store),
and other sites' results pulled into it from an OCI registry (launch.sharing)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from launch.console import console as make_console
from launch.errors import UsageError
from launch.results import store
from launch.shapes import rich_text, terminal

results_app = typer.Typer(help="The results history: every result.json, indexed in SQLite.", no_args_is_help=True)
LIST_COLUMNS = (
    "run_id",
    "fabric",
    "engine",
    "model",
    "world_size",
    "total_img_per_s",
    "ci95_img_per_s",
    "comm_fraction",
    "status",
    "transport",
    "disturbance",
)


def _filters(benchmark, engine, model, fabric, ranks, status, transport) -> dict:
    return {
        "benchmark": benchmark,
        "engine": engine,
        "model": model,
        "fabric": fabric,
        "world_size": ranks,
        "status": status,
        "transport": transport,
    }


def _cell(value) -> str:
    """A table cell: indexed values come from results, perhaps another site's (escapes removed,
    markup inert)."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else rich_text(value)


# shared filter options
BENCHMARK = typer.Option(None, help="train | allreduce | ...")
ENGINE = typer.Option(None, help="horovod | ddp | native")
MODEL = typer.Option(None, help="model name")
FABRIC = typer.Option(None, help="fabric preset")
RANKS = typer.Option(None, help="world size")
STATUS = typer.Option(None, help="ok | failed | transport_mismatch")
TRANSPORT = typer.Option(None, help="transport verdict: match | mismatch | unverified")


@results_app.command("list")
def list_results(
    benchmark: Optional[str] = BENCHMARK,
    engine: Optional[str] = ENGINE,
    model: Optional[str] = MODEL,
    fabric: Optional[str] = FABRIC,
    ranks: Optional[int] = RANKS,
    status: Optional[str] = STATUS,
    transport: Optional[str] = TRANSPORT,
    limit: int = typer.Option(50, help="at most this many, newest first (0: all)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable JSON"),
):
    """List indexed results, newest first.

    Example: fabric-bench results list --fabric ethernet --status ok
    """
    rows = store.query(
        store.connect(), limit or None, **_filters(benchmark, engine, model, fabric, ranks, status, transport)
    )
    if as_json:
        print(json.dumps([{c: row[c] for c in (*store.COLUMNS, "path")} for row in rows], indent=2))
        return
    table = Table(title=rich_text(f"results ({store.store_path()})"))
    for column in LIST_COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(row[c]) for c in LIST_COLUMNS))
    make_console().print(table)


@results_app.command()
def show(run_id: str = typer.Argument(..., help="run id (or a unique prefix)")):
    """Print one indexed result as JSON (as the current schema reads it: a result from before the
    disturbance record says "not recorded"); whether it was disturbed, and by what, goes to stderr.

    Example: fabric-bench results show 20260101T120000-torch-ddp
    """
    from launch.results.result import Result, disturbance_causes, disturbance_summary
    from launch.schema import migrate

    found = Result(migrate(store.get(store.connect(), run_id)))
    print(json.dumps(found, indent=2, sort_keys=True))
    for line in [disturbance_summary(found), *disturbance_causes(found)]:
        print(f"disturbance: {terminal(line)}", file=sys.stderr)


@results_app.command()
def export(
    benchmark: Optional[str] = BENCHMARK,
    engine: Optional[str] = ENGINE,
    model: Optional[str] = MODEL,
    fabric: Optional[str] = FABRIC,
    ranks: Optional[int] = RANKS,
    status: Optional[str] = STATUS,
    transport: Optional[str] = TRANSPORT,
    _csv: bool = typer.Option(True, "--csv", hidden=True),  # accepted for old scripts; CSV is the only format
    output: Optional[Path] = typer.Option(None, help="file to write (default: stdout)"),
):
    """Export indexed results as CSV (one row per run, the indexed columns and path).

    Example: fabric-bench results export --engine horovod --output horovod.csv
    """
    rows = store.query(store.connect(), None, **_filters(benchmark, engine, model, fabric, ranks, status, transport))
    out = open(output, "w", newline="", encoding="utf-8") if output else sys.stdout
    shown = terminal if out.isatty() else None  # a file gets the values as held; a terminal, no escapes
    try:
        writer = csv.writer(out)
        writer.writerow([*store.COLUMNS, "path"])
        for row in rows:
            values = [row[c] for c in (*store.COLUMNS, "path")]
            writer.writerow([shown(v) if shown and isinstance(v, str) else v for v in values])
    finally:
        if output:
            out.close()


@results_app.command("index")
def index(directory: Path = typer.Argument(..., help="a results or sweep directory")):
    """(Re)index every result.json under DIRECTORY.

    Example: fabric-bench results index results/
    """
    count, problems = store.index_tree(directory)
    for problem in problems:
        print(terminal(problem), file=sys.stderr)
    print(f"indexed {count} results into {store.store_path()}")


PULLED_COLUMNS = ("digest", "site", "fabric", "kind", "model", "nodes-ranks", "stack", "created", "runs")


@results_app.command("pull")
def pull(
    source: str = typer.Argument(
        ...,
        metavar="REGISTRY[/REPO][@sha256:...]",
        help="the repository results were published to (REPO defaults to fabric-bench/results)",
    ),
    allowed_signers: Optional[Path] = typer.Option(
        None, help="OpenSSH allowed-signers file: the site keys you trust, each principal a site's name (to pull)"
    ),
    revoked: Optional[Path] = typer.Option(
        None, help="revoked keys, one public key per line: nothing they signed is accepted"
    ),
    digest: list[str] = typer.Option(
        [], help="pull this artifact (its manifest digest; repeatable); default: every one the filters match"
    ),
    site: Optional[str] = typer.Option(None, help="only this site's results"),
    fabric: Optional[str] = typer.Option(None, help="only results on this fabric"),
    kind: Optional[str] = typer.Option(None, help="only this benchmark kind (train, allreduce, ...)"),
    model: Optional[str] = typer.Option(None, help="only this model"),
    size: Optional[str] = typer.Option(None, help="only this message-size range, MIN-MAX bytes"),
    nodes_ranks: Optional[str] = typer.Option(None, help="only runs of NODESxRANKS_PER_NODE, e.g. 2x8"),
    stack_digest: Optional[str] = typer.Option(None, help="only results on this stack (sha256:...)"),
    bundle_version: Optional[str] = typer.Option(None, help="only archives written by this bundle commit"),
    list_only: bool = typer.Option(False, "--list", help="list what is published (filtered); pull nothing"),
    as_json: bool = typer.Option(False, "--json", help="with --list: machine-readable JSON"),
    insecure: bool = typer.Option(False, help="plain HTTP to a registry not on this host (this host's always is)"),
):
    """Pull other sites' published results, verified, into the results store.

    Lists the repository's results artifacts (--list), pulls the chosen ones by digest, checks
    every blob's digest, the archive, its signature against --allowed-signers and --revoked, its
    results, and that its annotations and signer agree with the signed archive; then imports the
    results into the store keyed by their origin, the archive kept under the store's folder by
    digest. Unsigned, revoked, untrusted, tampered or malformed: refused in one line, exit 2, and
    nothing imported (all or nothing). Pulled results are data: nothing of theirs executes.

    Examples:
      fabric-bench results pull registry.example.org/hpc/fabric-results --list --fabric infiniband
      fabric-bench results pull registry.example.org/hpc/fabric-results --allowed-signers sites.allowed --revoked revoked.keys --kind train
    """
    from launch.sharing import annotations as notes
    from launch.sharing import pull as pulling
    from launch.sharing.registry import at
    from launch.sharing.trusted_keys import TrustedKeys

    repository, pinned = at(source, insecure)
    digests = [*([pinned] if pinned else []), *digest]
    filters = {
        "site": site,
        "fabric": fabric,
        "kind": kind,
        "model": model,
        "size": size,
        "nodes_ranks": nodes_ranks,
        "stack_digest": stack_digest,
        "bundle_version": bundle_version,
    }
    if list_only:
        listed, refused = pulling.published(repository)
        shown = [item for item in listed if notes.matches(item.annotations, filters)]
        if as_json:
            print(json.dumps([pulling.listing(item) for item in shown], indent=2))
        else:
            table = Table(title=rich_text(f"published in {repository.name}"))
            for column in PULLED_COLUMNS:
                table.add_column(column)
            for item in shown:
                said = item.annotations
                table.add_row(
                    *(
                        rich_text(value or "-")
                        for value in (
                            item.manifest_digest[:19],
                            said.get(notes.SITE),
                            said.get(notes.FABRIC),
                            said.get(notes.KIND),
                            said.get(notes.MODEL) or said.get(notes.SIZE),
                            said.get(notes.NODES_RANKS),
                            (said.get(notes.STACK_DIGEST) or "")[:19],
                            said.get(notes.CREATED),
                            said.get(notes.RUNS),
                        )
                    )
                )
            make_console().print(table)
        for line in refused:
            print(f"fabric-bench: refused: {terminal(line)}", file=sys.stderr)
        if refused:
            raise typer.Exit(2)
        return
    if allowed_signers is None:
        raise UsageError("pulling needs --allowed-signers FILE: the site keys you trust (--list needs none)")
    keys = TrustedKeys(allowed_signers, revoked)
    picked, skipped = pulling.chosen(repository, digests, filters)
    for line in skipped:
        print(f"fabric-bench: skipped: {terminal(line)}", file=sys.stderr)
    if not picked:
        print(f"nothing published in {repository.name} matches; nothing pulled")
        raise typer.Exit(2 if skipped else 0)
    with make_console(stderr=True).status(f"pulling and verifying {len(picked)} archives"):
        done = pulling.pull(repository, picked, keys)
    for record in done:
        print(
            terminal(
                f"{record.reference}: {len(record.result_paths)} results of site {record.site} "
                f"(signed by {record.signer}), origin {record.origin} -> {record.archive_path.parent}"
            )
        )
    print(f"pulled {len(done)} archives, {sum(len(i.result_paths) for i in done)} results, into {store.store_path()}")
    if skipped:  # the others are pulled and kept; the status still says something was refused
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.add_typer(results_app, name="results")
