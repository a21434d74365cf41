"""The `fabric-bench` command line (typer)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from launch.console import console as make_console
from launch.errors import UsageError
from launch.interrupt import stoppable_command
from launch.launchers import LAUNCHERS
from launch.runspec import RunSpec
from launch.runtimes import RUNTIMES

app = typer.Typer(
    help="Benchmark network fabrics for data-distributed deep-learning training.",
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
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
def root(version: bool = typer.Option(False, "--version", callback=show_version, is_eager=True,
                                      help="print the version and the bundle's commit, then exit")) -> None:
    """fabric-bench: run the same training and communication benchmarks on any fabric."""


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not name.replace("_", "").isalnum():
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


@app.command()
def run(
    benchmark: str = typer.Option("train", help="train (data-parallel training) | allreduce (micro-benchmark) | halo (3-D stencil)"),
    framework: str = typer.Option("torch", help="torch | tf"),
    engine: str = typer.Option("ddp", help="torch: horovod | ddp; tf: horovod | native"),
    model: str = typer.Option("resnet18", help="torchvision / keras.applications model name"),
    ranks: Optional[int] = typer.Option(None, help="total ranks (default 2, or nodes x ranks-per-node)"),
    batch_size: int = typer.Option(32, help="images per rank per batch"),
    image_size: Optional[int] = typer.Option(None, help="square input size (default: the model's)"),
    warmup: int = typer.Option(5, help="untimed warm-up batches"),
    iters: int = typer.Option(10, help="timed iterations"),
    batches_per_iter: int = typer.Option(5, help="batches per timed iteration"),
    precision: str = typer.Option("fp32", help="torch: fp32 | amp; tf: fp32 | mixed"),
    controller: str = typer.Option("mpi", help="Horovod controller: mpi (mpirun) | gloo (horovodrun)"),
    fp16_allreduce: bool = typer.Option(False, help="Horovod fp16 gradient compression"),
    fusion_threshold_mb: Optional[float] = typer.Option(None, help="Horovod fusion buffer (MiB)"),
    cycle_time_ms: Optional[float] = typer.Option(None, help="Horovod cycle time (ms)"),
    bucket_cap_mb: Optional[float] = typer.Option(None, help="DDP bucket size (MiB)"),
    tf32: str = typer.Option("on", help="on | off: TF32 math for float32 convolutions and matmuls on GPUs"),
    memory_format: Optional[str] = typer.Option(None, help="channels_last | channels_first (default: channels_last on GPUs)"),
    cudnn_benchmark: str = typer.Option("on", help="on | off: cuDNN autotuning of convolutions"),
    seed: int = typer.Option(1234),
    launcher: Optional[str] = typer.Option(None, help=" | ".join(LAUNCHERS) + " (default: the site's)"),
    runtime: Optional[str] = typer.Option(None, help=" | ".join(RUNTIMES) + " (default: the site's)"),
    image: Optional[str] = typer.Option(None, help="container image (SIF path, podman name, ch-run dir)"),
    fabric: Optional[str] = typer.Option(None, help="fabric preset: ethernet | infiniband | omnipath | efa | slingshot"),
    allreduce: Optional[str] = typer.Option(None, help="nccl | mpi | gloo (default: the engine's choice)"),
    gpudirect: Optional[str] = typer.Option(None, help="on | off (GPUDirect RDMA for NCCL/UCX)"),
    nodes: int = typer.Option(1, help="nodes"),
    ranks_per_node: Optional[int] = typer.Option(None, help="ranks on each node"),
    gpus_per_node: int = typer.Option(0, help="GPUs on each node (0: CPU run)"),
    hostfile: Optional[Path] = typer.Option(None, help="mpirun hostfile"),
    mpi_plugin: str = typer.Option("pmix", help="srun --mpi= plugin: pmix | pmi2"),
    partition: Optional[str] = typer.Option(None, help="Slurm partition"),
    account: Optional[str] = typer.Option(None, help="Slurm account"),
    time_limit: Optional[str] = typer.Option(None, help="Slurm time limit"),
    link_rate: Optional[str] = typer.Option(None, help="emulated launcher: link rate, e.g. 1gbit"),
    backend: str = typer.Option("mpi", help="allreduce: mpi | torch | horovod"),
    min_bytes: int = typer.Option(8, help="allreduce: smallest message (bytes)"),
    max_bytes: int = typer.Option(256 * 2**20, help="allreduce: largest message (bytes)"),
    grid: int = typer.Option(96, help="halo: global grid points per edge"),
    site: Optional[Path] = typer.Option(None, help="site config (TOML)"),
    env: list[str] = typer.Option([], help="extra NAME=VALUE for every rank, overriding presets (repeatable)"),
    results: Path = typer.Option(Path("results"), help="results directory"),
    timeout: Optional[float] = typer.Option(None, help="kill the run (all ranks) after this many seconds"),
    stall_timeout: Optional[float] = typer.Option(None, help="end the run when a rank starts no step (batch, allreduce, halo step) for this many seconds; the result names who stopped where"),
    dry_run: bool = typer.Option(False, help="print the exact argv and env, run nothing"),
    force: bool = typer.Option(False, help="run even when a host <-> image preflight check fails (recorded in the result)"),
):
    """Run one benchmark and write RESULTS/<run_id>/result.json.

    Examples:
      fabric-bench run --engine horovod --model resnet18 --ranks 2 --image-size 64
      fabric-bench run --runtime apptainer --image ethernet-cpu.sif --launcher mpirun --fabric ethernet
    """
    from launch.run import execute_run, preflight_skipped, prepare
    from launch.site import Site, load_site
    from launch.results.comm import comm_table
    from launch.results.table import training_table

    for name, value in (("--timeout", timeout), ("--stall-timeout", stall_timeout)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be > 0, got {value}")
    total = resolve_ranks(ranks, nodes, ranks_per_node)
    site_config = load_site(site) if site else Site.default()
    scheduler = site_config.scheduler
    spec = RunSpec(
        benchmark=benchmark, framework=framework, engine=engine, model=model, ranks=total, batch_size=batch_size,
        image_size=image_size, warmup=warmup, iters=iters, batches_per_iter=batches_per_iter,
        precision=precision, controller=controller, fp16_allreduce=fp16_allreduce,
        fusion_threshold_mb=fusion_threshold_mb, cycle_time_ms=cycle_time_ms,
        bucket_cap_mb=bucket_cap_mb, tf32=tf32, memory_format=memory_format,
        cudnn_benchmark=cudnn_benchmark, seed=seed, extra_env=parse_env(env),
        launcher=launcher or site_config.launcher, runtime=runtime or site_config.runtime, image=image, fabric=fabric, nodes=nodes,
        gpus_per_node=gpus_per_node, hostfile=str(hostfile) if hostfile else None,
        allreduce=allreduce, gpudirect=gpudirect, mpi_plugin=mpi_plugin,
        partition=partition or scheduler.partition, account=account or scheduler.account,
        time_limit=time_limit or scheduler.slurm_time(), link_rate=link_rate,
        backend=backend, min_bytes=min_bytes, max_bytes=max_bytes, grid=grid,
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
    console.print(training_table([result]) if benchmark == "train" else comm_table(result))
    console.print(f"result: {prepared.run_dir / 'result.json'}")
    if result["status"] != "ok":
        raise typer.Exit(1)


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
)
for _module in COMMAND_MODULES:
    __import__(_module, fromlist=["register"]).register(app)


def fail(message: str) -> None:
    print(f"fabric-bench: error: {message}", file=sys.stderr)
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
