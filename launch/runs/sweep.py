"""Sweeps: run every point of an experiment, resumably; one failure never stops the rest.

A point already `ok` in the sweep directory is skipped; `failed` ones rerun on
request; interrupted or never-started ones always run. Each run is limited to
the experiment's time_limit_s (launch.ranks.execute kills the launcher and every rank
it started). Ctrl-C kills the current run, keeps every finished result and
leaves the sweep resumable.

A point whose run was disturbed while timed (its disturbance record, launch.disturbance) is
measured again, at most REMEASURE_DISTURBED times; every run is kept, each re-measurement
names the run it repeats and why (`remeasure_of`), and the latest is the point's result.

With `one_job` (launcher sbatch) the whole sweep is one Slurm job: the job runs
this same sweep with `--launcher srun` inside its allocation, and this side
submits it, follows the index for progress and collects the results.
"""

from __future__ import annotations


import contextlib
import dataclasses
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from containers.files import write_json_atomic
from launch import shapes
from launch.fleet import sbatch_wait, slurm
from launch.ranks import interrupt
from launch.ranks.command import Command
from launch.errors import UsageError
from launch.ranks.execute import execute
from launch.ranks.interrupt import interrupted_by
from launch.runs import dropped as drops
from launch.runs import images
from launch.plan.experiment import Experiment, Point, blame, expand
from launch.ranks.launchers import SRUN, launcher_of, tool_path
from launch.disturbance import quiet
from launch.kinds import kind_of
from launch.schema import at
from launch.figures import value_text
from launch.results.result import Result, disturbance_causes, disturbed, fields_of, read as load_result
from launch.runs.run import execute_run, prepare
from launch.site.config import Site
from launch.runs.sweep_state import SweepState, exclusive
from launch.analysis import aggregate
from launch.analysis.table import points_table, verdict_tables

SUMMARY_SCHEMA_VERSION = 1
JOB_MARGIN_S = 120  # one-job: start-up and collection on top of the runs' limits
REMEASURE_DISTURBED = 2  # a disturbed point is measured again at most this many times


@dataclass
class Sweep:
    experiment: Experiment
    points: list[Point]
    directory: Path
    site: Site
    launcher: str | None = None  # overrides the experiment's (srun inside one job)
    retry_failed: bool = False
    force: bool = False  # run points whose preflight fails (recorded in each result)
    stall_timeout: float | None = None  # end a point whose ranks stop beating (launch.ranks.heartbeat)
    exclude_nodes: str | None = None  # Slurm nodes every point leaves out (e.g. named by `locate`)
    remeasure_disturbed: int = REMEASURE_DISTURBED  # 0: keep a disturbed point's first run
    keep_disturbed: bool = False  # verdicts and tables keep disturbed runs (left out by default)
    quiet_check: list[dict] = field(default_factory=list)  # each node's report before the runs (check_quiet)
    dropped: list[drops.Dropped] = field(default_factory=list)  # what the plan left out, and why
    state: SweepState = field(init=False)

    def __post_init__(self) -> None:
        self.state = SweepState(self.directory, self.experiment.name)

    def todo(self) -> list[Point]:
        return [p for p in self.points if self.state.to_run(p.key, self.retry_failed)]

    def dropped_lines(self) -> list[str]:
        """One line per entry of what the plan left out (launch.runs.dropped), then their count."""
        if not self.dropped:
            return []
        return [line for d in self.dropped for line in d.lines()] + [drops.summary_line(self.dropped)]


def plan(
    experiment: Experiment,
    directory: Path,
    site: Site,
    launcher: str | None = None,
    retry_failed: bool = False,
    force: bool = False,
    stall_timeout: float | None = None,
    exclude_nodes: str | None = None,
    excluded_because: str | None = None,
) -> Sweep:
    """Expand and check against the site; raises UsageError before anything runs. Combinations no
    engine can run and points preflight would refuse are left out, each with why (launch.runs.dropped).
    `excluded_because`: where exclude_nodes came from, for a refusal (e.g. what locate named)."""
    points, refused = drops.preflight_drops(expand(experiment, site, launcher))
    if not points:
        raise UsageError(
            f"{experiment.path.name}: preflight would refuse every point: " + "; ".join(d.reason for d in refused[:3])
        )
    if exclude_nodes:
        if any(not launcher_of(p.spec).slurm for p in points):
            raise UsageError(
                f"{excluded_because or '--exclude-nodes'}: leaving nodes out applies to Slurm "
                "launchers (srun, sbatch) only"
            )
        points = [
            dataclasses.replace(p, spec=dataclasses.replace(p.spec, exclude_nodes=exclude_nodes).validated())
            for p in points
        ]
    for point in points:
        try:  # fabric presets, images: what prepare resolves, without running anything
            prepare(point.spec, directory / "runs", site, run_id="check")
        except UsageError as exc:
            raise blame(experiment, exc) from None
    check_node_counts(experiment, points, exclude_nodes, excluded_because)
    sweep = Sweep(experiment, points, directory, site, launcher, retry_failed, force, stall_timeout, exclude_nodes)
    sweep.dropped = drops.matrix_drops(experiment, site, launcher) + refused
    return sweep


def check_images(sweep: Sweep) -> None:
    """Every image the points left to run name passes the gate a travelling file's image does
    (launch.runs.images: this site has it, or --accept-image names it), before anything runs;
    the first that does not is refused in one line naming its key. A dry run does not ask."""
    seen: set[tuple[str, str | None]] = set()
    for point in sweep.todo():
        spec = point.spec
        if (spec.runtime, spec.image) in seen:
            continue
        seen.add((spec.runtime, spec.image))
        why = images.refusal(spec, sweep.experiment.accepted_images)
        if why:
            raise sweep.experiment.error("image", why)


def check_node_counts(
    experiment: Experiment, points: list[Point], exclude_nodes: str | None = None, excluded_because: str | None = None
) -> None:
    """Under Slurm, refuse node counts the partition (or allocation) cannot hold, once the nodes
    left out are left out; such a refusal names the --exclude-nodes the user can give instead."""
    left_out = slurm.expand_nodes(exclude_nodes) if exclude_nodes else []
    asked: dict[tuple, int] = {}
    for point in points:
        spec = point.spec
        if launcher_of(spec).slurm:
            where = (launcher_of(spec), spec.partition)
            asked[where] = max(asked.get(where, 0), spec.nodes)
    for (launcher, partition), nodes in asked.items():
        in_allocation = not launcher.batch  # srun runs inside the allocation it was given
        available = slurm.nodes_available(in_allocation, partition)
        if available is None:
            continue
        inside = in_allocation and os.environ.get("SLURM_JOB_NUM_NODES", "").isdigit()  # else: sinfo's count
        place = "this allocation" if inside and available else f"partition {partition or '(default)'}"
        if nodes > available:
            raise experiment.error("nodes", f"{nodes} nodes asked, but {place} has {available}")
        left = available - len(left_out)
        if left_out and nodes > left:
            because = excluded_because or f"--exclude-nodes {exclude_nodes} leaves out {len(left_out)}"
            raise experiment.error(
                "nodes",
                f"{nodes} nodes asked, but {place} has {available}, and {because}: "
                f"{left} left; with points of at most {left} nodes, --exclude-nodes "
                f"{exclude_nodes} does it",
            )


# ------------------------------------------------------------------ running


def check_quiet(sweep: Sweep, seconds: float = quiet.QUIET_SECONDS) -> list[dict]:
    """Is every node quiet before the runs? Under Slurm, one task on each node the partition (or
    allocation) offers, less those left out; else this host (mpirun's other hosts: not checked)."""
    slurm_points = [p.spec for p in sweep.todo() if launcher_of(p.spec).slurm]
    if slurm_points:
        spec = max(slurm_points, key=lambda s: s.nodes)
        available = slurm.nodes_available(not launcher_of(spec).batch, spec.partition)
        left_out = len(slurm.expand_nodes(sweep.exclude_nodes)) if sweep.exclude_nodes else 0
        nodes = max(spec.nodes, (available or 0) - left_out)
        prefix = [
            "srun",
            f"--nodes={nodes}",
            "--ntasks-per-node=1",
            "--job-name=fabric-bench-quiet",
            "--time=5",
            *slurm.Request.parsed(spec.partition, exclude=sweep.exclude_nodes).options(),
        ]
        reports = quiet.check_nodes(prefix, seconds)
    else:
        reports = [quiet.sample_here(seconds)]
        if any(p.spec.hostfile for p in sweep.todo()):
            reports.append(
                {
                    "host": "(the hostfile's other hosts)",
                    "verdict": "not checked",
                    "why": "only this host is sampled without Slurm",
                }
            )
    sweep.quiet_check = reports
    return reports


def run_point(sweep: Sweep, point: Point, console: Console | None = None) -> Result:
    """One point, measured again while its run was disturbed (at most `remeasure_disturbed`
    times; every run kept, each naming the one it repeats and why)."""
    result = run_point_on_nodes(sweep, point, console)
    for attempt in range(1, sweep.remeasure_disturbed + 1):
        fields = fields_of(result)
        if fields.status != "ok" or not disturbed(result):
            break
        why = disturbance_causes(result)
        if console:
            console.print(
                f"[yellow]disturbed[/yellow] {point.label}: {'; '.join(why)}: measuring again "
                f"({attempt} of at most {sweep.remeasure_disturbed})",
                highlight=False,
                soft_wrap=True,  # one line however long the causes: a log reader (and a grep) sees it whole
            )
        result = run_point_on_nodes(
            sweep, point, console, {"remeasure_of": {"run_id": fields.run_id, "attempt": attempt, "why": why}}
        )
    return result


def run_point_on_nodes(
    sweep: Sweep, point: Point, console: Console | None = None, annotations: dict | None = None
) -> Result:
    """One point; under Slurm, a point whose node failed is run once more without that node
    (`--exclude`), both runs recorded under the point (the second names the first)."""
    result = run_point_once(sweep, point, annotations)
    fields = fields_of(result)
    run_dir = sweep.state.runs_dir / str(fields.run_id)
    failed = slurm.failed_nodes(run_dir) if fields.status != "ok" and launcher_of(point.spec).slurm else []
    if not failed:
        return result
    exclude = ",".join(sorted({*filter(None, (point.spec.exclude_nodes or "").split(",")), *failed}))
    if console:
        console.print(
            f"[yellow]node failure[/yellow] {point.label} on {', '.join(failed)}: once more without {exclude}",
            highlight=False,
        )
    again = dataclasses.replace(point, spec=dataclasses.replace(point.spec, exclude_nodes=exclude))
    return run_point_once(
        sweep, again, {**(annotations or {}), "retry_of": {"run_id": fields.run_id, "failed_nodes": failed}}
    )


def run_point_once(sweep: Sweep, point: Point, annotations: dict | None = None) -> Result:
    """One point, isolated: any failure is recorded as `failed` with its reason."""
    state = sweep.state
    run_id = f"{point.label}-{point.key}-{len(state.point(point.key)['runs']) + 1}"
    try:
        prepared = prepare(point.spec, state.runs_dir, sweep.site, run_id=run_id)
        state.mark(point.key, point.label, "running", run_id=run_id)
        result = execute_run(
            point.spec,
            prepared,
            timeout=sweep.experiment.time_limit_s,
            echo=False,
            stall_timeout=sweep.stall_timeout,
            force=sweep.force,
            annotations=annotations,
        )
    except KeyboardInterrupt as exc:
        stop = interrupted_by(exc)
        state.mark(point.key, point.label, "interrupted", f"interrupted by {stop.name}; all processes of the run ended")
        raise stop from None
    except Exception as exc:  # noqa: BLE001 - a broken run must not end the sweep
        reason = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
        state.mark(point.key, point.label, "failed", reason)
        return Result({"status": "failed", "reason": reason, "wall_seconds": 0.0})
    # any status but ok (failed, or a verdict such as transport_mismatch) is a failure to retry on request
    fields = fields_of(result)
    status = "ok" if fields.status == "ok" else "failed"
    why = fields.reason if fields.status in ("ok", "failed") else f"{fields.status}: {fields.reason}"
    state.mark(point.key, point.label, status, why, run_id)
    return result


def progress_bar(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def outcome_line(point: Point, result: Result) -> str:
    """One run's line: its figure of merit as its kind declares it (launch.kinds), or why it failed."""
    fields = fields_of(result)
    if fields.status == "ok":
        kind = kind_of(result)
        value = kind.value(fields) if kind is not None else None
        figure = f"{value_text(value, kind.metric.unit)} {kind.metric.unit}" if kind and value is not None else "-"
        mark = " [yellow]disturbed[/yellow]" if disturbed(result) else ""
        return f"[green]ok[/green]     {point.label}  {figure} ({fields.wall_seconds or 0:.1f} s){mark}"
    return f"[red]failed[/red] {point.label}: {fields.reason}"


def run_here(sweep: Sweep, console: Console, results: list[dict]) -> None:
    """Run the points still to run with the points' own launcher, appending to `results`."""
    with progress_bar(console) as progress:  # run_sweep holds the directory
        sweep.state.save()
        todo = sweep.todo()
        task = progress.add_task(sweep.experiment.name, total=len(todo))
        for point in todo:
            interrupt.check()  # a stop asked between runs: nothing is lost
            progress.update(task, description=point.label)
            result = run_point(sweep, point, progress.console)
            results.append(result)
            progress.console.print(outcome_line(point, result), highlight=False)
            progress.advance(task)
        progress.update(task, description=sweep.experiment.name)


def one_job_script(sweep: Sweep, fabric_bench: str) -> str:
    specs = [p.spec for p in sweep.points]
    limit = sweep.experiment.time_limit_s
    if limit is None:
        raise sweep.experiment.error(
            "time_limit_s", "a one-job sweep needs [experiment].time_limit_s to size its allocation"
        )
    argv = [
        fabric_bench,
        "sweep",
        str(sweep.experiment.path.resolve()),
        "--dir",
        str(sweep.directory.resolve()),
        "--launcher",
        SRUN.name,
    ]
    if sweep.site.path:
        argv += ["--site", str(Path(sweep.site.path).resolve())]
    if sweep.retry_failed:
        argv.append("--retry-failed")
    if sweep.force:
        argv.append("--force")
    if sweep.stall_timeout is not None:
        argv += ["--stall-timeout", f"{sweep.stall_timeout:g}"]
    if sweep.exclude_nodes:
        argv += ["--exclude-nodes", sweep.exclude_nodes]
    if sweep.remeasure_disturbed != REMEASURE_DISTURBED:
        argv += ["--remeasure-disturbed", str(sweep.remeasure_disturbed)]
    if sweep.keep_disturbed:
        argv.append("--keep-disturbed")
    for name in sweep.experiment.accepted_env:  # the job's own sweep reads the file through the same gate
        argv += ["--accept-env", name]
    for image in sweep.experiment.accepted_images:  # and runs only the images this side accepted
        argv += ["--accept-image", image]
    return slurm.sweep_job_script(
        name=slurm.job_name("sweep", sweep.experiment.name),
        nodes=max(s.nodes for s in specs),
        tasks_per_node=max(s.ranks_per_node for s in specs),
        gpus_per_node=max(s.gpus_per_node for s in specs),
        minutes=slurm.minutes_for(limit * len(sweep.todo()) + JOB_MARGIN_S),
        output=shapes.slurm_log("the sweep's directory", sweep.directory.resolve()),
        request=slurm.Request.parsed(specs[0].partition, specs[0].account, exclude=sweep.exclude_nodes),
        argv=argv,
        modules=sweep.site.modules,
    )


def run_one_job(sweep: Sweep, console: Console, results: list[dict]) -> None:
    """Submit the whole sweep as one job, follow its index, and append the results it wrote."""
    todo = sweep.todo()
    before = {p.key: len(sweep.state.point(p.key)["runs"]) for p in todo}
    script = sweep.directory.resolve() / "sweep-job.sbatch"
    sweep.directory.mkdir(parents=True, exist_ok=True)
    script.write_text(one_job_script(sweep, tool_path("fabric-bench")), encoding="utf-8")
    if shutil.which("sbatch") is None:
        raise UsageError("sbatch not found: cannot submit the sweep job")
    stop = threading.Event()
    with progress_bar(console) as progress:
        task = progress.add_task(f"{sweep.experiment.name} (one Slurm job)", total=len(todo))

        def follow() -> None:
            while not stop.wait(1.0):
                state = SweepState(sweep.directory, sweep.experiment.name)
                done = sum(
                    state.status(p.key) in ("ok", "failed") and len(state.point(p.key)["runs"]) > before[p.key]
                    for p in todo
                )
                progress.update(task, completed=done)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            per_run = sweep.experiment.time_limit_s
            assert per_run is not None, "checked by one_job_sweep's caller"
            limit = per_run * len(todo) + 2 * JOB_MARGIN_S
            outcome = execute(
                Command(sbatch_wait.argv(script)),
                sweep.directory / "sweep-job.log",
                timeout=limit,
                echo=False,
            )
        finally:
            stop.set()
            follower.join()
        if outcome.ended_early:
            slurm.cancel(slurm.jobs_running_script(script))
        if outcome.stopped_by is not None:
            raise outcome.stopped_by
    sweep.state = SweepState(sweep.directory, sweep.experiment.name)
    if outcome.exit_code != 0 and not any(len(sweep.state.point(p.key)["runs"]) > before[p.key] for p in todo):
        raise UsageError(f"the sweep job failed before any run: {' | '.join(outcome.log_tail[-3:])}")
    for point in todo:
        path = sweep.state.latest_result(point.key)
        if path and len(sweep.state.point(point.key)["runs"]) > before[point.key]:
            results.append(load_result(path))


# ----------------------------------------------------------------- reporting


def latest_results(sweep: Sweep) -> list[tuple[Point, Result | None]]:
    return [(p, load_result(path) if (path := sweep.state.latest_result(p.key)) else None) for p in sweep.points]


def configuration(result: Result) -> tuple:
    spec = fields_of(result).spec
    return (spec.fabric, spec.allreduce, spec.gpudirect, spec.launcher) if spec else (None, None, None, None)


def orders(sweep: Sweep) -> dict[str, list[str]]:
    """The experiment's order of each verdict axis's values: the first is the verdicts' reference."""
    experiment = sweep.experiment
    out = {}
    for axis in ("fabric", *aggregate.COMM_KNOBS):  # the verdicts' axes (launch.analysis.verdict.AXES)
        values = experiment.matrix.get(axis) or ((experiment.fixed[axis],) if axis in experiment.fixed else ())
        out[axis] = [v for v in values if isinstance(v, str)]
    return out


def judged(
    sweep: Sweep, latest: list[tuple[Point, Result | None]] | None = None
) -> tuple[list[Result], list[aggregate.Point], dict]:
    """The latest results, their points (launch.analysis.aggregate) and verdicts (launch.analysis.verdict)."""
    found = [r for _, r in (latest if latest is not None else latest_results(sweep)) if r is not None]
    points = aggregate.aggregate(found, sweep.keep_disturbed)
    from launch.analysis import verdict  # here: it imports scipy (~0.8 CPU-s), which a dry run never needs

    return found, points, verdict.all_verdicts(points, None, orders(sweep))


def tables(sweep: Sweep) -> list:
    """The verdict tables and their paragraphs first, then one points table per fabric configuration,
    each with the 1-rank baselines it is measured against (repetitions aggregated)."""
    found, points, verdicts = judged(sweep)
    name = sweep.experiment.name
    out = verdict_tables(verdicts, f"{name}: ")
    groups: dict[tuple, list[aggregate.Point]] = {}
    for point in points:
        if point.ranks > 1:
            groups.setdefault(configuration(point.first), []).append(point)
    if not groups:
        return out + [points_table(points, title=f"{name}: 1-rank runs")]
    for config, members in groups.items():
        fabric, allreduce, gpudirect, launcher = config
        baselines: list[aggregate.Point] = []
        for point in members:
            if point.baseline is not None and all(point.baseline is not b for b in baselines):
                baselines.append(point.baseline)
        title = (
            f"{name}: fabric {fabric or '-'}, allreduce {allreduce or 'default'}, "
            f"gpudirect {gpudirect or 'default'}, launcher {launcher}"
        )
        out.append(points_table(baselines + members, title=title))
    return out


def summary(sweep: Sweep, ran: list[dict], wall_seconds: float, interrupted: bool) -> dict:
    """The sweep's summary; overhead = (sweep wall time - the runs' own wall_seconds) / runs.

    `verdicts` and `points` are what the report shows for the same results (launch.analysis.aggregate,
    launch.analysis.verdict); each run's scaling_efficiency divides by its series' aggregated 1-rank baseline."""
    found = latest_results(sweep)
    _, points, verdicts = judged(sweep, found)
    benchmark_seconds = sum(fields_of(r).wall_seconds or 0.0 for r in ran)
    statuses = [sweep.state.status(p.key) for p in sweep.points]
    rows = []
    for point, result in found:
        entry = {
            "key": point.key,
            "label": point.label,
            "repetition": point.repetition,
            "baseline": point.baseline,
            "status": sweep.state.status(point.key),
            "reason": sweep.state.point(point.key).get("reason"),
            "result": None,
        }
        latest = sweep.state.latest_result(point.key)
        if result and latest is not None:
            aggregated, fields = aggregate.point_of(points, result), fields_of(result)
            entry.update(
                result=str(latest.relative_to(sweep.directory)),
                total_img_per_s=at(fields, "throughput.total_img_per_s"),
                wall_seconds=fields.wall_seconds,
                scaling_efficiency=aggregated.run_efficiency(result) if aggregated else None,
                slurm=at(fields, "slurm"),
            )
        rows.append(entry)
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "experiment": sweep.experiment.name,
        "experiment_file": str(sweep.experiment.path),
        "directory": str(sweep.directory),
        "finished_unix": time.time(),
        "interrupted": interrupted,
        "points": len(sweep.points),
        "ran": len(ran),
        "ok": statuses.count("ok"),
        "failed": statuses.count("failed"),
        "pending": len(statuses) - statuses.count("ok") - statuses.count("failed"),
        "wall_seconds": wall_seconds,
        "benchmark_wall_seconds": benchmark_seconds,
        "overhead_seconds_per_run": (wall_seconds - benchmark_seconds) / len(ran) if ran else None,
        "verdicts": verdicts,
        "verdict_orders": orders(sweep),
        "aggregated": [p.describe() for p in points],
        "runs": rows,
        "dropped": [dataclasses.asdict(d) for d in sweep.dropped],
        "quiet_check": sweep.quiet_check,
    }


def write_summary(sweep: Sweep, data: dict) -> Path:
    return write_json_atomic(sweep.directory / "summary.json", data)


def run_sweep(sweep: Sweep, console: Console, one_job: bool = False) -> dict:
    """Run what is left, then print the tables and write summary.json (also when interrupted).

    The directory is held (sweep_state.exclusive) before its index is read again and until the
    summary is written: a second sweep on it is refused before it reads or writes anything. With
    one job, the job's own sweep holds it while it runs, and this process only to sum up."""
    check_images(sweep)  # a file's image runs only where this site has it or accepts it
    if one_job:
        return _run_and_sum_up(sweep, console, run_one_job, hold_to_sum_up=True)
    with exclusive(sweep.directory):
        sweep.state.reload()
        return _run_and_sum_up(sweep, console, run_here, hold_to_sum_up=False)


def _run_and_sum_up(sweep: Sweep, console: Console, run, hold_to_sum_up: bool) -> dict:
    started = time.monotonic()
    ran: list[dict] = []
    interrupted = False
    try:
        run(sweep, console, ran)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        with exclusive(sweep.directory) if hold_to_sum_up else contextlib.nullcontext():
            sweep.state.reload()
            data = summary(sweep, ran, time.monotonic() - started, interrupted)
            path = write_summary(sweep, data)
        if not interrupted:
            for table in tables(sweep):
                console.print(table)
        console.print(
            f"{data['ok']} ok, {data['failed']} failed, {data['pending']} pending of {data['points']} "
            f"runs; summary: {path}",
            highlight=False,
        )
    return data
