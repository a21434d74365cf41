"""`fabric-bench sweep EXPERIMENT`: run an experiment's matrix, resumably."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from launch.console import console as make_console
from launch.errors import UsageError
from launch.ranks.interrupt import stoppable_command
from launch.ranks.launchers import LAUNCHERS, SBATCH, SRUN


def sweep(
    experiment: Path = typer.Argument(..., help="experiment file (TOML)"),
    directory: Optional[Path] = typer.Option(None, "--dir", help="sweep directory (default: results/sweeps/NAME)"),
    site: Optional[Path] = typer.Option(None, help="site config (TOML)"),
    launcher: Optional[str] = typer.Option(None, help="override the experiment's launcher: " + " | ".join(LAUNCHERS)),
    one_job: bool = typer.Option(False, help="with --launcher sbatch: the whole sweep as one Slurm job"),
    retry_failed: bool = typer.Option(False, help="rerun points that failed (finished ones are always skipped)"),
    force: bool = typer.Option(
        False, help="run points even when a host <-> image preflight check fails (recorded in each result)"
    ),
    stall_timeout: Optional[float] = typer.Option(
        None, help="end a point when a rank starts no step for this many seconds; its result names who stopped where"
    ),
    exclude_nodes: Optional[str] = typer.Option(None, help="Slurm nodes every point leaves out, e.g. n3,n[5-6]"),
    exclude_located: Optional[Path] = typer.Option(
        None,
        help="leave out what a `fabric-bench locate` named (its "
        "locate.json): each slow node, and one end of each "
        "slow link (the fewest nodes that cut them all)",
    ),
    remeasure_disturbed: int = typer.Option(
        2,
        help="measure a point again while its run was disturbed, at most "
        "this many times (0: never; docs/disturbance.md)",
    ),
    keep_disturbed: bool = typer.Option(
        False, help="keep disturbed runs in the tables and verdicts (left out by default, with how many and why)"
    ),
    quiet_check: float = typer.Option(
        3.0,
        help="seconds to sample every node before the runs (this host, or one "
        "Slurm task per node); a busy node is named (0: no check)",
    ),
    accept_busy: bool = typer.Option(
        False,
        help="run on busy nodes without asking (without a terminal the "
        "sweep goes on and says so; each run's record still judges it)",
    ),
    dry_run: bool = typer.Option(False, help="list the runs and their count, run nothing"),
    accept_env: list[str] = typer.Option(
        [],
        help="a variable outside the allow-list the experiment's [run.env] may set (repeatable; its value may "
        "hold no path; those that run, load, read or write what they name never)",
    ),
    accept_image: list[str] = typer.Option(
        [],
        help="an image the experiment names that this site has not built (no digest of it in the image store) "
        "and may run all the same, as the runs name it (repeatable; a dry run needs none)",
    ),
):
    """Run every point of EXPERIMENT; a rerun skips finished points.

    Prints a table per fabric configuration with scaling efficiency against the
    1-rank baselines it runs too, and writes DIR/summary.json.

    Examples:
      fabric-bench sweep experiments/cpu-small.experiment.toml --dry-run
      fabric-bench sweep experiments/hpec2020.experiment.toml --site site.toml --launcher sbatch --one-job
      fabric-bench sweep pulled.experiment.toml --accept-image localhost/fabric-bench-ethernet-cpu:latest
    """
    from launch.plan.experiment import load_experiment
    from launch.site.config import Site, load_site
    from launch.runs.sweep import check_images, plan, run_sweep

    if stall_timeout is not None and stall_timeout <= 0:
        raise UsageError(f"--stall-timeout must be > 0, got {stall_timeout:g}")
    if not 0 <= quiet_check <= 60:
        raise UsageError(f"--quiet-check must be 0-60 seconds, got {quiet_check:g}")
    if not 0 <= remeasure_disturbed <= 5:
        raise UsageError(f"--remeasure-disturbed must be 0-5, got {remeasure_disturbed}")
    if launcher is not None and launcher not in LAUNCHERS:
        raise UsageError(f"unknown launcher {launcher!r}; choose from {', '.join(LAUNCHERS)}")
    loaded = load_experiment(experiment, tuple(accept_env), tuple(accept_image))
    if one_job and (launcher or loaded.fixed.get("launcher")) != SBATCH.name:
        raise UsageError('--one-job needs --launcher sbatch (or launcher = "sbatch" in [run])')
    site_config = load_site(site) if site else Site.default()
    placeholders: list[str] = []
    if dry_run and not site:  # prepare a cluster run on a laptop: site values as placeholders
        from launch.plan.experiment import placeholder_site

        site_config, placeholders = placeholder_site(loaded, site_config)
    directory = directory or Path("results") / "sweeps" / loaded.name
    # one job: the ranks are started by srun inside the job's allocation
    left_out, because = None, None
    if exclude_located:
        from launch.fleet.located import leave_out
        from launch.fleet.slurm import cluster_nodes

        # another site's file, perhaps: names this cluster has, when Slurm can say
        left_out = leave_out(exclude_located, cluster_nodes())
        given = [n for n in (exclude_nodes or "").split(",") if n]
        exclude_nodes = ",".join(dict.fromkeys([*given, *left_out.nodes])) or None
        because = f"--exclude-located {exclude_located} leaves out {left_out.summary()}"
    swept = plan(
        loaded,
        directory,
        site_config,
        SRUN.name if one_job else launcher,
        retry_failed,
        force,
        stall_timeout,
        exclude_nodes,
        because,
    )
    swept.remeasure_disturbed, swept.keep_disturbed = remeasure_disturbed, keep_disturbed
    console = make_console()
    for line in left_out.lines() if left_out else []:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in swept.dropped_lines():  # what the plan left out, and why (launch.runs.dropped)
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if dry_run:
        print_plan(swept, console, one_job)
        if placeholders:
            console.print(
                "no --site: site-specific values are placeholders (<fabric.key>); a site file must fill "
                f"in {'; '.join(placeholders)} (and the images the runs name)",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
        return
    check_images(swept)  # before the quiet check: an image this site neither has nor accepted never runs
    if quiet_check and not one_job and swept.todo():  # one job: its own sweep checks its allocation
        ask_if_busy(swept, quiet_check, accept_busy, console)
    with stoppable_command():  # Ctrl-C, kill, scancel, hang-up: the run ends whole, results kept
        data = run_sweep(swept, console, one_job)
    if data["failed"] or data["pending"]:
        raise typer.Exit(1)


def ask_if_busy(swept, seconds: float, accept_busy: bool, console: Console) -> None:
    """Sample every node for `seconds`; name the busy ones and ask (a terminal), or go on and say so."""
    from launch.disturbance.quiet import busy_lines
    from launch.runs.sweep import check_quiet

    def say(line: str, style: str | None = None) -> None:
        console.print(f"quiet check: {line}", style=style, highlight=False, markup=False, soft_wrap=True)

    reports = check_quiet(swept, seconds)
    for report in reports:
        if report.get("verdict") == "not checked":
            say(f"{report['host']} not checked ({report['why']})")
    busy = busy_lines(reports)
    if not busy:
        say(f"{', '.join(r['host'] for r in reports if r.get('verdict') == 'quiet')} quiet over {seconds:g} s")
        return
    for line in busy:
        say(line, style="yellow")
    if accept_busy:
        return
    if sys.stdin.isatty():
        if not typer.confirm("run the sweep on busy nodes? (its disturbed runs are measured again)"):
            raise UsageError("the sweep was not started: busy nodes (--accept-busy runs it anyway)")
        return
    say(
        "no terminal to ask; going on (--accept-busy says so; each run's disturbance record judges it, and "
        "disturbed points are measured again)"
    )


def print_plan(swept, console: Console, one_job: bool) -> None:
    todo = {p.key for p in swept.todo()}
    for number, point in enumerate(swept.points, 1):
        s = point.spec
        state = "run" if point.key in todo else swept.state.status(point.key)
        console.print(
            f"{number:4d}  {point.key}  {state:7s}  {s.launcher:8s} {s.ranks:4d} rank{'s' if s.ranks != 1 else ' '}"
            f"  {point.label}",
            highlight=False,
            soft_wrap=True,
        )
    baselines = sum(p.baseline for p in swept.points)
    console.print(
        f"{counted(len(swept.points), 'run')} ({counted(baselines, '1-rank baseline')}, "
        f"{counted(swept.experiment.repetitions, 'repetition')}); {len(todo)} to run, "
        f"{len(swept.points) - len(todo)} finished or failed; nothing was run",
        highlight=False,
    )
    if one_job:
        from launch.ranks.launchers import tool_path
        from launch.runs.sweep import one_job_script

        print("job script:\n" + one_job_script(swept, tool_path("fabric-bench")), end="")


def counted(n: int, noun: str) -> str:
    """'1 run', '3 runs'."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
