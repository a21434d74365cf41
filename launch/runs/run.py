"""One run end to end: RunSpec -> Plan -> Command -> processes -> rank records -> result.json."""

from __future__ import annotations

import socket

from dataclasses import dataclass
from pathlib import Path

from bench.placement import flags as placement_flags
from bench.record import read_records
from containers import ompi_rules
from launch.fleet import slurm
from launch.ranks import emulated
from launch.ranks import interrupt
from launch.analysis import baseline
from launch.results import plausibility, store, transport
from launch.ranks.command import Command
from launch.kinds import trains
from launch.ranks.execute import execute
from launch.ranks.launchers import Plan, build_command, launcher_of, rank_env, ranks_step_name, sbatch_script
from launch.ranks.heartbeat import StallWatch, stall_reason
from launch.disturbance import gpu as gpu_readings
from launch.disturbance import judge as disturbance
from launch.disturbance.nodes import NodeSamplers, RunSampler
from launch.disturbance.sample import Sampler
from launch.results.assemble import assemble, build, new_run_id, progress_of, write_result
from launch.results.result import Result
from launch.ranks.runspec import RunSpec
from launch.site.fabric_preset import Preset, resolve
from launch.site.preflight import check_image_fabric, horovod_built_for, preflight, preflight_skipped  # noqa: F401
from launch import shapes
from launch.ranks.runtimes import Bind, host_leaks_set, host_namespaces, runtime_name, runtime_named
from launch.shapes import ImageRef
from launch.site.config import Site


@dataclass
class Prepared:
    run_id: str
    run_dir: Path
    plan: Plan
    command: Command
    preset: Preset
    job_script: str | None = None  # sbatch only: written into run_dir at execution
    fabric_checks: dict | None = None  # launch.site.preflight: host <-> image checks, filled before launch
    image_labels: dict | None = None  # launch.site.preflight: the image's labels, read once before launch


def make_plan(spec: RunSpec, run_dir: Path, site: Site) -> tuple[Plan, Preset]:
    # podman shares only the host namespaces the run needs (its network for a fabric, IPC and PIDs
    # where ranks of a node sit in containers of their own)
    shared = host_namespaces(spec.fabric, not launcher_of(spec).one_host, spec.ranks_per_node)
    runtime = runtime_named(runtime_name("--runtime", spec.runtime), shared)
    preset = resolve(spec, site)
    binds: tuple[Bind, ...] = ()
    if runtime.containerised:  # ranks write their records into the run directory
        binds = (Bind(str(run_dir), str(run_dir)), *preset.binds)
    fabric_env, run_files = preset.env, {}
    if preset.coll_rules:  # in the run directory: every rank reads it, in or out of a container
        rules_file = run_dir / ompi_rules.FILE_NAME
        run_files[rules_file] = preset.coll_rules
        fabric_env = {**fabric_env, **ompi_rules.environment(str(rules_file))}
    plan = Plan(
        record_dir=run_dir / "ranks",
        runtime=runtime,
        # the argv sinks take shapes: the image a runtime runs, mpirun's hostfile (launch.shapes)
        image=shapes.image("--image", spec.image) if spec.image else None,
        hostfile=shapes.hostfile("--hostfile", spec.hostfile) if spec.hostfile else None,
        fabric_env=fabric_env,
        binds=binds,
        job_script=run_dir / "job.sbatch",
        modules=site.modules,
        run_files=run_files,
    )
    if launcher_of(spec).emulated:  # nodes are network namespaces (launch.fleet.emulate)
        plan = emulated.plan_for(spec, plan)
    return plan, preset


def prepare(spec: RunSpec, results_dir: Path, site: Site | None = None, run_id: str | None = None) -> Prepared:
    spec.validated()
    run_id = run_id or new_run_id(*spec.label_parts(), f"n{spec.ranks}")
    run_dir = results_dir.resolve() / run_id
    plan, preset = make_plan(spec, run_dir, site or Site.default())
    script = sbatch_script(spec, plan) if launcher_of(spec).batch else None
    return Prepared(run_id, run_dir, plan, build_command(spec, plan), preset, script)


def stall_watch(spec: RunSpec, prepared: Prepared, timeout: float | None):
    """The heartbeat check of a run with a stall timeout. Every benchmark beats (bench.progress);
    the clock starts at the first beat, so a batch job's time in the queue is not a stall."""
    if timeout is None:
        return None
    return StallWatch(prepared.plan.record_dir, spec.ranks, timeout).check


def disturbance_sampler(spec: RunSpec, prepared: Prepared):
    """The sampler of a run (launch.disturbance.sample): this host, the run's tree under its keeper
    and the ranks named by their heartbeats, the fabric interface the run's variables name, and
    the GPUs where the run asked for them and nvidia-smi is here."""
    from bench.placement import traffic_nic

    nic, _ = traffic_nic(rank_env(spec, prepared.plan))  # a batch job's command carries no env: its script does
    gpus = spec.gpus_per_node > 0 and gpu_readings.available()
    record_dir = prepared.plan.record_dir

    def sampler(keeper_pid: int) -> RunSampler:
        here = Sampler(keeper_pid, record_dir, (nic,) if nic else (), gpus=gpus)
        if not launcher_of(spec).slurm:
            return RunSampler(here)
        step = ranks_step_name(prepared.run_dir)
        return RunSampler(here, NodeSamplers(record_dir, step, spec.nodes, nic, spec.gpus_per_node > 0))

    return sampler


def disturbance_record(sampler: RunSampler, records: list[dict], so_far: dict) -> dict:
    """The run's disturbance record: every node's where a Slurm run's nodes were sampled
    (launch.disturbance.nodes), else this host's, naming the hosts it could not see."""
    here, host = sampler.here, socket.gethostname()
    files = sampler.nodes.files() if sampler.nodes is not None else {}
    if files:
        return disturbance.nodes_record(files, records, so_far, here.cost(), host)
    found = disturbance.record(
        here.snapshots, records, so_far, here.interval, here.cost(), host, here.gpu_readings if here.gpus else None
    )
    if sampler.nodes is not None:  # why the nodes' own samplers left nothing
        found["sampler"]["nodes_not_sampled"] = sampler.nodes.why_not or "no node sampler wrote a file"
    return found


def driver_on_nodes(record: dict | None, sampler: RunSampler | None, labels: dict | None) -> dict | None:
    """The preflight record with the NVIDIA driver judged on each sampled node (a Slurm run)."""
    from containers.recipe import LABEL_PREFIX
    from launch.site.preflight import driver

    if sampler is None or sampler.nodes is None:
        return record
    return driver.on_nodes(record, sampler.nodes.files(), (labels or {}).get(f"{LABEL_PREFIX}.version.cuda"))


def result_origin() -> dict:
    """The host that launched the run and the bundle's commit."""
    from containers.files import git

    return {"host": socket.gethostname(), "bundle_commit": git("rev-parse", "HEAD") or "unknown"}


def host_env_record(runtime, spec: RunSpec) -> dict:
    """Which of the host's Python and preload variables (launch.ranks.runtimes.HOST_LEAKS) were set where
    the run was launched, and whether the image's environment command cleared them (a container
    runtime, unless the run set them itself); the host runtime keeps them (its ranks run the
    host's own Python)."""
    found = host_leaks_set()
    cleared = [name for name in found if runtime.containerised and name not in spec.extra_env]
    return {"set": found, "cleared_in_image": cleared}


def image_record(runtime, image: ImageRef, labels: dict | None = None) -> dict:
    """The image a run used: its digest, its fabric-bench labels (those preflight read, else
    read now) and the stack image's digest (every fabric image of a flavour is FROM one
    stack image: the same stack_digest)."""
    labels = runtime.labels(image) if labels is None else labels
    return {
        "path": image,
        "digest": runtime.digest(image),
        "labels": labels,
        "stack_digest": labels.get("org.fabric-bench.stack-digest"),
    }


def ended_early(outcome, reason: str | None, records: list[dict]) -> dict:
    """An interrupted or stalled run's status and what its ranks finished before it ended."""
    if outcome.stopped_by is not None:  # what the ranks finished before the signal
        return {
            "status": "interrupted",
            "reason": reason,
            "interruption": {"signal": outcome.stopped_by.name, "progress": progress_of(records)},
        }
    if outcome.stalled:  # who stopped where, and what they finished before
        return {"status": "stalled", "reason": reason, "stall": {**outcome.stalled, "progress": progress_of(records)}}
    return {}


def execute_run(
    spec: RunSpec,
    prepared: Prepared,
    timeout: float | None = None,
    echo: bool = True,
    annotations: dict | None = None,
    stall_timeout: float | None = None,
    force: bool = False,
) -> Result:
    checked = preflight(spec, prepared, force=force, echo=echo)
    runtime = prepared.plan.runtime
    used = prepared.plan.image
    image = image_record(runtime, used, prepared.image_labels) if used else None  # before the run
    prepared.run_dir.mkdir(parents=True, exist_ok=False)
    if prepared.job_script is not None and prepared.plan.job_script is not None:
        prepared.plan.job_script.write_text(prepared.job_script, encoding="utf-8")
    for path, text in prepared.plan.run_files.items():
        path.write_text(text, encoding="utf-8")
    with emulated.session(prepared.plan):  # the emulated launcher's cluster is up meanwhile
        outcome = execute(
            prepared.command,
            prepared.run_dir / "output.log",
            timeout=timeout,
            echo=echo,
            watch=stall_watch(spec, prepared, stall_timeout),
            sample=disturbance_sampler(spec, prepared),
        )
    reason = None
    if outcome.stalled:
        reason = stall_reason(outcome.stalled)
    elif outcome.timed_out:
        reason = f"timed out after {timeout:g} s; all ranks killed"
    elif outcome.stopped_by is not None:
        reason = f"interrupted by {outcome.stopped_by.name}; all processes of the run ended"
    log_tail, scheduler = outcome.log_tail, None
    if launcher_of(spec).slurm:  # job id, nodes, version; a batch job: the ranks' log is the job's
        scheduler, job_log = slurm.after_run(
            launcher_of(spec).batch, prepared.run_dir, prepared.plan.job_script, stopped=outcome.ended_early
        )
        log_tail = job_log or log_tail
    records = read_records(prepared.plan.record_dir)
    if scheduler is not None:  # the steps and hosts the ranks ran in (bench.record.slurm_step)
        scheduler = slurm.step_facts(records, scheduler)
    rank_starts = [r["program_start_unix"] for r in records if r.get("program_start_unix")]
    log_path = prepared.run_dir / "output.log"
    assembled = assemble(
        run_id=prepared.run_id,
        spec=spec.as_dict(),
        argv=prepared.command.argv,
        env=prepared.command.env,
        records=records,
        exit_code=outcome.exit_code,
        log_tail=log_tail,
        seconds=outcome.seconds,
        reason=reason,
        extra={
            "launch": {
                "launcher": spec.launcher,
                "runtime": runtime.name,
                "preflight": checked,
                # the host's PYTHONPATH/PYTHONHOME/LD_PRELOAD: set when launched, cleared in the image
                "host_env": host_env_record(runtime, spec),
                # what the fabric preset decided from the host that made it (fork safety, by the kernel)
                "fabric_preset": prepared.preset.decisions or None,
                "first_output_seconds": outcome.first_output_seconds,
                # command start -> first rank running bench code (launcher + runtime overhead)
                "first_rank_start_seconds": min(rank_starts) - outcome.started_unix if rank_starts else None,
            },
            "image": image,
            "preflight": prepared.fabric_checks,
            # where each rank sat, and a GPU/NIC on different NUMA nodes or shared cores (bench.placement)
            "placement": placement_flags(records, transport.nccl_rank_nics(transport.run_log(log_path)))
            if trains(spec.benchmark)
            else None,
            "slurm": scheduler,
            "origin": result_origin(),  # which site and bundle wrote it (launch.results.store keys by it)
            **emulated.result_fields(spec, prepared.plan),
            **(annotations or {}),  # e.g. replay_of
        },
    )
    sampler = outcome.sampler
    result = build(
        assembled,
        lambda _: ended_early(outcome, reason, records),
        # was the run disturbed while it was timed, and by what (launch.disturbance; docs/disturbance.md)
        lambda so_far: {"disturbance": disturbance_record(sampler, records, so_far)},
        # the driver floor judged on the nodes that ran the ranks (their samplers read it)
        lambda so_far: {"preflight": driver_on_nodes(so_far.get("preflight"), sampler, prepared.image_labels)},
        lambda so_far: transport.fields(so_far, log_path),
        # is the number normal for this link? (launch.results.plausibility: busbw / line rate, GPUDirect asked vs seen)
        lambda so_far: {"plausibility": plausibility.verdict(so_far, prepared.preset.link_gbit_s)},
    )
    store.index_quietly(write_result(prepared.run_dir, result), result)
    # normal, slow or fast for this site: baseline.json beside it, the store, metrics (docs/baselines.md)
    baseline.after_run(prepared.run_dir, result, echo=echo)
    if outcome.stopped_by is not None:
        raise outcome.stopped_by
    interrupt.check()  # a stop asked as the run ended: its result is already written
    return result
