"""The `fabric-bench` command line (typer)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from launch.errors import UsageError
from launch.runspec import RunSpec

app = typer.Typer(
    help="Benchmark network fabrics for data-distributed deep-learning training.",
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
)
console = Console(width=None if sys.stdout.isatty() else 160)


@app.callback()
def root() -> None:
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
    framework: str = typer.Option("torch", help="torch | tf"),
    engine: str = typer.Option("ddp", help="torch: horovod | ddp; tf: horovod | native"),
    model: str = typer.Option("resnet18", help="torchvision / keras.applications model name"),
    ranks: int = typer.Option(2, help="number of ranks (processes)"),
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
    seed: int = typer.Option(1234),
    env: list[str] = typer.Option([], help="extra NAME=VALUE for every rank (repeatable)"),
    results: Path = typer.Option(Path("results"), help="results directory"),
    timeout: Optional[float] = typer.Option(None, help="kill the run (all ranks) after this many seconds"),
    dry_run: bool = typer.Option(False, help="print the exact argv and env, run nothing"),
):
    """Run one benchmark and write RESULTS/<run_id>/result.json.

    Example: fabric-bench run --engine horovod --model resnet18 --ranks 2 --image-size 64
    """
    from launch.run import execute_run, prepare
    from launch.table import training_table

    spec = RunSpec(
        framework=framework, engine=engine, model=model, ranks=ranks, batch_size=batch_size,
        image_size=image_size, warmup=warmup, iters=iters, batches_per_iter=batches_per_iter,
        precision=precision, controller=controller, fp16_allreduce=fp16_allreduce,
        fusion_threshold_mb=fusion_threshold_mb, cycle_time_ms=cycle_time_ms,
        bucket_cap_mb=bucket_cap_mb, seed=seed, extra_env=parse_env(env),
    )
    if timeout is not None and timeout <= 0:
        raise UsageError(f"--timeout must be > 0, got {timeout}")
    prepared = prepare(spec, results)
    if dry_run:
        print("argv:", json.dumps(prepared.command.argv))
        print("env:", json.dumps(prepared.command.env, sort_keys=True))
        print("shell:", prepared.command.render())
        return
    result = execute_run(spec, prepared, timeout=timeout)
    console.print(training_table([result]))
    console.print(f"result: {prepared.run_dir / 'result.json'}")
    if result["status"] != "ok":
        raise typer.Exit(1)


# Command groups and commands that live in their own modules. Each module
# exposes `register(app)`; add one line per module here.
COMMAND_MODULES = (
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
    except (KeyboardInterrupt, typer.Abort):
        print("fabric-bench: interrupted; finished results are kept", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
