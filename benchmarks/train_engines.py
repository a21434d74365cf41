"""The main job (`make bench`): training throughput per engine at 1 and 2 ranks.

Runs each engine at 1 and 2 ranks on this host (alternating engines, so slow
drifts of a shared machine hit both alike), writes every result under
results/, and prints the table plus the figures the foundation issue asks for:
img/s, horovod/ddp ratio, and scaling efficiency against the 1-rank run.
Where Horovod is not built yet (a fresh `make bench`), a 1-rank DDP run comes
first and is printed, then scripts/setup.sh builds Horovod, then the engines run.

    python benchmarks/train_engines.py [--model resnet18 --image-size 64 ...]
    python benchmarks/train_engines.py --frameworks torch,tf --model resnet50 --tf-model ResNet50
"""

from __future__ import annotations

import argparse
import math
import importlib.util
import os
import subprocess
import sys
from pathlib import Path


from launch.console import console as make_console
from launch.errors import UsageError
from launch.results import aggregate
from launch.results.aggregate import run_value
from launch.results.headline import disturbance_line, impossible_same_cores, ratio_line, run_name, unreadable
from launch.results.result import as_result, disturbed, field_of
from launch.runs.run import execute_run, prepare
from launch.ranks.runspec import RunSpec
from launch.results.table import training_table

REPO = Path(__file__).resolve().parent.parent
ENGINES = {"torch": ("horovod", "ddp"), "tf": ("horovod", "native")}
DEFAULT_MODEL = {"torch": "resnet18", "tf": "SmallCNN"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frameworks", default="torch", help="comma list: torch,tf")
    p.add_argument("--model", default=None, help="torch model (default: resnet18)")
    p.add_argument(
        "--tf-model", default=None, help="tf model (default: SmallCNN), e.g. ResNet50 beside --model resnet50"
    )
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--batches-per-iter", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ranks", default="1,2", help="comma list of rank counts")
    p.add_argument("--results", type=Path, default=Path("results"))
    args = p.parse_args()
    console = make_console()
    try:
        rank_counts = [int(n) for n in args.ranks.split(",")]
        frameworks = [f for f in args.frameworks.split(",") if f]
        for framework in frameworks:
            if framework not in ENGINES:
                raise UsageError(f"unknown framework {framework!r}; choose from {', '.join(ENGINES)}")
    except (ValueError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    models = {"torch": args.model, "tf": args.tf_model}

    def spec_of(framework: str, engine: str, ranks: int) -> RunSpec:
        return RunSpec(
            framework=framework,
            engine=engine,
            model=models[framework] or DEFAULT_MODEL[framework],
            ranks=ranks,
            batch_size=args.batch_size,
            image_size=args.image_size,
            warmup=args.warmup,
            iters=args.iters,
            batches_per_iter=args.batches_per_iter,
        )

    if "torch" in frameworks and not horovod_ready("torch"):
        # the first look: DDP needs no Horovod, so its 1-rank figure comes before Horovod's build;
        # the engines are then run side by side as always (this run is kept, not in their table)
        spec = spec_of("torch", "ddp", min(rank_counts))
        try:
            prepared = prepare(spec, args.results)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        console.rule(f"first result: torch ddp x{spec.ranks} (Horovod is built next)")
        first = execute_run(spec, prepared, echo=False)
        console.print(training_table([first]))
        if disturbed(first):
            console.print(f"[yellow]{run_name(first)}: {disturbance_line(first)}[/yellow]", highlight=False)
        side = ["--tensorflow"] if "tf" in frameworks else []
        print(
            "set-up: building Horovod for the engines side by side (scripts/setup.sh"
            f"{' ' + side[0] if side else ''}; ~5 min the first time, cached after)",
            flush=True,
        )
        if (code := set_up(*side)) != 0:
            return code
    if "tf" in frameworks and not tensorflow_side_ready():
        print(
            "set-up: the TensorFlow runs need TensorFlow and Horovod's TensorFlow ops in this venv, which "
            "`make bench` leaves out to reach its first result sooner: scripts/setup.sh --tensorflow "
            "(~8 min the first time)",
            flush=True,
        )
        if (code := set_up("--tensorflow")) != 0:
            return code

    results = []
    for framework in frameworks:
        for ranks in rank_counts:
            for engine in ENGINES[framework]:
                spec = spec_of(framework, engine, ranks)
                try:
                    prepared = prepare(spec, args.results)
                    console.rule(f"{framework} {engine} x{ranks}")
                    results.append(execute_run(spec, prepared, echo=False))
                except UsageError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2

    console.print(training_table(results))
    runs = [as_result(r) for r in results]  # read through the schema's accessors from here
    for r in runs:  # every disturbed run named, with its causes (launch.disturbance)
        if disturbed(r):
            console.print(f"[yellow]{run_name(r)} ({r.run_id}): {disturbance_line(r)}[/yellow]", highlight=False)
    points = aggregate.aggregate(runs)  # the one baseline rule (launch.results.aggregate)
    for framework in frameworks:
        engines = ENGINES[framework]
        for ranks in rank_counts:
            row = {
                field_of(r, "engine"): r
                for r in runs
                if field_of(r, "framework") == framework and r.world_size == ranks and r.status == "ok"
            }
            if len(row) == 2:
                a, b = (row[e].total_img_per_s or math.nan for e in engines)
                console.print(
                    ratio_line(
                        f"{framework} x{ranks}: {engines[0]}/{engines[1]} throughput ratio",
                        a / b,
                        [row[e] for e in engines],
                    ),
                    highlight=False,
                )
        for r in runs:
            point = aggregate.point_of(points, r)
            eff = point.run_efficiency(r) if point is not None else None
            if (
                point is not None
                and field_of(r, "framework") == framework
                and (r.world_size or 0) > 1
                and eff is not None
            ):
                built_on = [r, *(point.baseline.runs if point.baseline is not None else [])]
                same = point.same_cores_efficiency(r)
                if same is None:
                    console.print(
                        ratio_line(
                            f"{framework} {field_of(r, 'engine')} x{r.world_size}: scaling efficiency", eff, built_on
                        ),
                        highlight=False,
                    )
                    continue
                assert point.baseline is not None  # same_cores_efficiency is None without one
                label = (
                    f"{framework} {field_of(r, 'engine')} x{r.world_size}: the ranks share this host's cores; "
                    f"total throughput {run_value(r):.1f} vs {point.baseline.mean:.1f} img/s at 1 rank: "
                    f"same-cores efficiency"
                )
                line = ratio_line(label, same, built_on)
                if unreadable(built_on) is None:
                    line += (
                        f" (per-rank scaling efficiency {eff:.2f}, which counts each rank as if it had the "
                        f"1-rank run's cores: ~{1 / (r.world_size or 1):.2f} by construction)"
                    )
                    if (impossible := impossible_same_cores(same, r.world_size or 1)) is not None:
                        line += f"\n  [red]flagged: {impossible}[/red]"
                console.print(line, highlight=False)
    console.print(f"results under {args.results.resolve()}")
    return 0 if all(r.status == "ok" for r in runs) else 1


def set_up(*options: str) -> int:
    """scripts/setup.sh for this venv (its phase lines on the console); its exit code."""
    return subprocess.run(
        [str(REPO / "scripts" / "setup.sh"), *options], cwd=REPO, env={**os.environ, "VENV": sys.prefix}
    ).returncode


def horovod_ready(framework: str) -> bool:
    """Horovod installed with the framework's ops (its mpi_lib extension under horovod/<framework>/)."""
    horovod = importlib.util.find_spec("horovod")
    if horovod is None or not horovod.submodule_search_locations:
        return False
    folder = {"torch": "torch", "tf": "tensorflow"}[framework]
    return any(
        library for root in horovod.submodule_search_locations for library in Path(root, folder).glob("mpi_lib*.so")
    )


def tensorflow_side_ready() -> bool:
    """TensorFlow importable and Horovod built with its TensorFlow ops."""
    return importlib.util.find_spec("tensorflow") is not None and horovod_ready("tf")


if __name__ == "__main__":
    sys.exit(main())
