"""The `fabric-bench` command line (typer)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Optional

import typer

from launch.console import console as make_console
from launch import shapes
from launch.errors import UsageError
from launch.ranks.interrupt import stoppable_command
from launch.kinds import kind
from launch.ranks.launchers import LAUNCHERS
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import RUNTIMES

app = typer.Typer(
    help="Benchmark network fabrics for data-distributed deep-learning training.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)
console = make_console()


def version_line() -> str:
    """The installed package's version and the checkout's commit."""
    from importlib.metadata import PackageNotFoundError, version

    from containers.files import bundle_commit

    try:
        installed = version("fabric-bench")
    except PackageNotFoundError:
        installed = "not installed"
    return f"fabric-bench {installed} ({bundle_commit() or 'no git checkout'})"


def show_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit(0)


@app.callback()
def root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=show_version,
        is_eager=True,
        help="print the version and the bundle's commit, then exit",
    ),
) -> None:
    """fabric-bench: run the same training and communication benchmarks on any fabric."""


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not name.replace("_", "").isalnum():
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


# Options of `run` beyond the RunSpec's fields (those are generated from the fields: spec_options)
RUN_OPTIONS: list[tuple[str, Any, Any]] = [  # (name, annotation, typer.Option)
    ("ranks", Optional[int], typer.Option(None, help="total ranks (default 2, or nodes x ranks-per-node)")),
    ("ranks_per_node", Optional[int], typer.Option(None, help="ranks on each node")),
    ("launcher", Optional[str], typer.Option(None, help=" | ".join(LAUNCHERS) + " (default: the site's)")),
    ("runtime", Optional[str], typer.Option(None, help=" | ".join(RUNTIMES) + " (default: the site's)")),
    ("site", Optional[Path], typer.Option(None, help="site config (TOML)")),
    ("env", list[str], typer.Option([], help="extra NAME=VALUE for every rank, overriding presets (repeatable)")),
    ("results", Path, typer.Option(Path("results"), help="results directory")),
    ("timeout", Optional[float], typer.Option(None, help="kill the run (all ranks) after this many seconds")),
    (
        "stall_timeout",
        Optional[float],
        typer.Option(
            None,
            help="end the run when a rank starts no step (batch, "
            "allreduce, halo step) for this many seconds; the "
            "result names who stopped where",
        ),
    ),
    ("dry_run", bool, typer.Option(False, help="print the exact argv and env, run nothing")),
    (
        "force",
        bool,
        typer.Option(False, help="run even when a host <-> image preflight check fails (recorded in the result)"),
    ),
]


def spec_options() -> list[inspect.Parameter]:
    """One `run` option per RunSpec field that has one: its type, default and help are the
    field's (launch.ranks.runspec.setting), so the command and the spec cannot drift apart."""
    hints = typing.get_type_hints(RunSpec)
    return [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=_optional(hints[f.name]),
            default=typer.Option(f.default, help=f.metadata["help"] or None),
        )
        for f in dataclasses.fields(RunSpec)
        if f.metadata.get("cli")
    ]


def _optional(hint: Any) -> Any:
    """`int | None` as typer reads it (Optional[int])."""
    arms = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and type(None) in arms:
        return Optional[next(a for a in arms if a is not type(None))]
    return hint


def run(**options: Any) -> None:
    """Run one benchmark and write RESULTS/<run_id>/result.json.

    Examples:
      fabric-bench run --engine horovod --model resnet18 --ranks 2 --image-size 64
      fabric-bench run --runtime apptainer --image ethernet-cpu.sif --launcher mpirun --fabric ethernet
    """
    from launch.runs.run import execute_run, preflight_skipped, prepare
    from launch.site.config import Site, load_site
    from launch.results.result import typed

    fields = {p.name: options.pop(p.name) for p in SPEC_OPTIONS}
    ranks, ranks_per_node, launcher, runtime, site, env, results, timeout, stall_timeout, dry_run, force = (
        options.pop(name) for name, _, _ in RUN_OPTIONS
    )
    for name, value in (("--timeout", timeout), ("--stall-timeout", stall_timeout)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be > 0, got {value}")
    site_config = load_site(site) if site else Site.default()
    scheduler = site_config.scheduler
    spec = RunSpec(
        **{
            **fields,
            "ranks": resolve_ranks(ranks, fields["nodes"], ranks_per_node),
            "extra_env": parse_env(env),
            "launcher": launcher or site_config.launcher,
            "runtime": runtime or site_config.runtime,
            "hostfile": str(fields["hostfile"]) if fields["hostfile"] else None,
            "partition": fields["partition"] or scheduler.partition,
            "account": fields["account"] or scheduler.account,
            "time_limit": fields["time_limit"] or scheduler.slurm_time(),
        }
    )
    prepared = prepare(spec, results, site_config)
    if dry_run:
        print("argv:", json.dumps(prepared.command.argv))
        print("env:", json.dumps(prepared.command.env, sort_keys=True))
        print("shell:", prepared.command.render())
        if prepared.job_script:
            print("job script:\n" + prepared.job_script, end="")
        print("preflight skipped:", "; ".join(preflight_skipped(spec, prepared)))
        return
    with stoppable_command():  # Ctrl-C, kill, hang-up: every process of the run ends, the result says so
        result = execute_run(spec, prepared, timeout=timeout, stall_timeout=stall_timeout, force=force)
    run_fields = typed(result)
    if run_fields is not None:  # the run's table, as its kind draws it (launch.kinds)
        console.print(kind(spec.benchmark).table(run_fields))
    from launch.analysis.headline import disturbance_line

    console.print(disturbance_line(result), highlight=False, markup=False)  # clean, or disturbed and by what
    console.print(f"result: {prepared.run_dir / 'result.json'}")
    if run_fields is None or run_fields.status != "ok":
        raise typer.Exit(1)


# benchmark first (what to run), then the spec's fields in their order, then how to run it
SPEC_OPTIONS = spec_options()
_PARAMETERS = sorted(SPEC_OPTIONS, key=lambda p: p.name != "benchmark") + [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=option)
    for name, annotation, option in RUN_OPTIONS
]
run.__signature__ = inspect.Signature(_PARAMETERS)  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in _PARAMETERS}
app.command()(run)


def resolve_ranks(ranks: int | None, nodes: int, ranks_per_node: int | None) -> int:
    if ranks_per_node is None:
        return 2 if ranks is None else ranks
    if ranks_per_node < 1:
        raise UsageError(f"--ranks-per-node must be >= 1, got {ranks_per_node}")
    if ranks is not None and ranks != nodes * ranks_per_node:
        raise UsageError(f"--ranks {ranks} contradicts --nodes {nodes} x --ranks-per-node {ranks_per_node}")
    return nodes * ranks_per_node


# Command groups and commands that live in their own modules. Each module
# exposes `register(app)`; add one line per module here.
COMMAND_MODULES = (
    "launch.cli.image",
    "launch.cli.probe",
    "launch.cli.site",
    "launch.cli.emulate",
    "launch.cli.sweep",
    "launch.cli.results",
    "launch.cli.report",
    "launch.cli.archive",
    "launch.cli.compare",
    "launch.cli.predict",
    "launch.cli.locate",
    "launch.cli.baseline",
    "launch.cli.publish",
)
for _module in COMMAND_MODULES:
    __import__(_module, fromlist=["register"]).register(app)


def fail(message: str) -> None:
    """The one line of a refusal; a value from a file it names may hold anything (launch.shapes)."""
    print(f"fabric-bench: error: {shapes.terminal(message)}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Entry point: every usage problem is one line on stderr and exit code 2."""
    try:
        code = app(standalone_mode=False)
    except UsageError as exc:
        fail(str(exc))
    except typer.TyperException as exc:  # typer's own parsing errors (bad option, bad type)
        fail(exc.format_message() if hasattr(exc, "format_message") else str(exc))
    except (KeyboardInterrupt, typer.Abort):  # run and sweep exit 128 + the signal themselves
        print("fabric-bench: interrupted; finished results are kept", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
