"""The main job (`make bench`): training throughput per engine at 1 and 2 ranks.

Runs each engine at each rank count on this host in alternating rounds (every round runs every
arm once, the order reversed every other round: benchmarks/rounds.py), so slow drifts of a
shared machine hit every arm alike; writes every result under results/ and prints each run as
it ends, then the table and the figures the foundation issue asks for, each from the rounds
with its paired 95 % CI: the horovod/ddp throughput ratio at each rank count, and each engine's
same-cores efficiency (the ranks share this host's cores: total throughput at N ranks over 1
rank's) beside its per-rank scaling efficiency. A round with a disturbed run (an outside cause
measured: launch.disturbance) is left out of a ratio and named; where fewer than two rounds are
clean the ratio is read from every round and marked with what disturbed them. An unsteady run
(its own steps varied) is kept, its spread in the CI. Every figure is printed, always.
Where Horovod is not built yet (a fresh `make bench`), a 1-rank DDP run comes first and is
printed, then scripts/setup.sh builds Horovod, then the rounds run.

    python benchmarks/train_engines.py [--rounds 5 --model resnet18 --image-size 64 ...]
    python benchmarks/train_engines.py --frameworks torch,tf --model resnet50 --tf-model ResNet50
    python benchmarks/train_engines.py --ranks 1 --rounds 10 --json calibration.json   # a long calibration
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.rounds import alternating, paired_ratio  # noqa: E402
from launch.console import console as make_console  # noqa: E402
from launch.errors import UsageError  # noqa: E402
from launch.analysis.headline import disturbance_line, impossible_same_cores, run_name  # noqa: E402
from launch.results.result import (  # noqa: E402
    Result,
    as_result,
    disturbance_causes,
    disturbance_record,
    disturbed,
    unsteady,
)
from launch.runs.run import execute_run, prepare  # noqa: E402
from launch.ranks.runspec import RunSpec  # noqa: E402
from launch.analysis.table import training_table  # noqa: E402

ENGINES = {"torch": ("horovod", "ddp"), "tf": ("horovod", "native")}
DEFAULT_MODEL = {"torch": "resnet18", "tf": "SmallCNN"}
# short runs, more rounds: between runs a shared 2-core machine moves by up to ±20 % (issue 55),
# which only rounds show; 16 one-batch steps a run (half the batches of the one run a side it
# replaced) leave MSER (bench.steady_state) room to find the warm-up
ROUNDS, ITERS, BATCHES_PER_ITER, WARMUP = 5, 16, 1, 3
MIN_CLEAN_ROUNDS = 2  # fewer clean rounds: the ratio is read from every round, marked


@dataclass(frozen=True)
class Arm:
    framework: str
    engine: str
    ranks: int

    def __str__(self) -> str:
        return f"{self.framework} {self.engine} x{self.ranks}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frameworks", default="torch", help="comma list: torch,tf")
    p.add_argument("--model", default=None, help="torch model (default: resnet18)")
    p.add_argument(
        "--tf-model", default=None, help="tf model (default: SmallCNN), e.g. ResNet50 beside --model resnet50"
    )
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--iters", type=int, default=ITERS)
    p.add_argument("--batches-per-iter", type=int, default=BATCHES_PER_ITER)
    p.add_argument("--warmup", type=int, default=WARMUP)
    p.add_argument("--ranks", default="1,2", help="comma list of rank counts")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="alternating rounds: every arm once a round")
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--json", type=Path, default=None, help="also write every run and figure here")
    args = p.parse_args()
    console = make_console()
    try:
        rank_counts = [int(n) for n in args.ranks.split(",")]
        frameworks = [f for f in args.frameworks.split(",") if f]
        for framework in frameworks:
            if framework not in ENGINES:
                raise UsageError(f"unknown framework {framework!r}; choose from {', '.join(ENGINES)}")
        if args.rounds < 1:
            raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    except (ValueError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    models = {"torch": args.model, "tf": args.tf_model}

    def spec_of(arm: Arm) -> RunSpec:
        return RunSpec(
            framework=arm.framework,
            engine=arm.engine,
            model=models[arm.framework] or DEFAULT_MODEL[arm.framework],
            ranks=arm.ranks,
            batch_size=args.batch_size,
            image_size=args.image_size,
            warmup=args.warmup,
            iters=args.iters,
            batches_per_iter=args.batches_per_iter,
        )

    if "torch" in frameworks and not horovod_ready("torch"):
        # the first look: DDP needs no Horovod, so its 1-rank figure comes before Horovod's build;
        # the engines are then run side by side as always (this run is kept, not in their table)
        spec = spec_of(Arm("torch", "ddp", min(rank_counts)))
        try:
            prepared = prepare(spec, args.results)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        console.rule(f"first result: torch ddp x{spec.ranks} (Horovod is built next)")
        first = execute_run(spec, prepared, echo=False)
        console.print(training_table([first]))
        if disturbed(first) or unsteady(first):
            console.print(f"{run_name(first)}: {disturbance_line(first)}", style="yellow", markup=False)
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

    arms = [Arm(f, e, n) for f in frameworks for n in rank_counts for e in ENGINES[f]]
    runs: dict[tuple[int, Arm], Result] = {}
    console.rule(f"{args.rounds} alternating round(s) of {', '.join(map(str, arms))}")
    for round_, arm in alternating(arms, args.rounds):
        spec = spec_of(arm)
        try:
            r = runs[round_, arm] = as_result(execute_run(spec, prepare(spec, args.results), echo=False))
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        figure = f"{r.figure:.1f} img/s" if r.ok and r.figure else f"{r.status}"
        console.print(
            f"round {round_ + 1} {arm}: {figure}; {disturbance_line(r)} ({r.run_id})",
            style="yellow" if disturbed(r) or not r.ok else None,
            markup=False,
            highlight=False,
        )
        if round_ == 0 and arm == arms[-1] and args.rounds > 1:  # the first figures, before the other rounds
            for line in figure_lines(arms, runs, rank_counts, first_round_only=True):
                console.print(line.text, markup=False, highlight=False)

    ordered: list[Result] = [runs[key] for key in sorted(runs, key=lambda k: (k[0], arms.index(k[1])))]
    console.print(training_table(ordered, title=f"Training throughput, {args.rounds} round(s)"))
    lines = figure_lines(arms, runs, rank_counts)
    for line in lines:
        console.print(line.text, style="yellow" if line.marked else None, markup=False, highlight=False)
    console.print(f"results under {args.results.resolve()}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"runs": [run_entry(k, r) for k, r in runs.items()], "figures": [line.data for line in lines]}, indent=2
            )
            + "\n"
        )
    return 0 if all(r.ok for r in runs.values()) else 1


@dataclass(frozen=True)
class Line:
    text: str
    marked: bool  # read over disturbed rounds
    data: dict


def paired_figure(label: str, pairs: list[tuple[int, Result, Result]]) -> Line | None:
    """'LABEL 1.03, 95 % CI [..] (paired, 5 rounds)' from each round's (a, b) runs (a/b): from
    the clean rounds, the others named; from every round, marked, where fewer than MIN_CLEAN_ROUNDS
    are clean; None where no round has both figures."""
    usable = [(k, a, b) for k, a, b in pairs if a.ok and b.ok and a.figure and b.figure]
    clean = [(k, a, b) for k, a, b in usable if not disturbed(a) and not disturbed(b)]
    chosen = clean if len(clean) >= MIN_CLEAN_ROUNDS else usable
    found = paired_ratio([(a.figure or 0.0, b.figure or 0.0) for _, a, b in chosen])
    if found is None:
        return None
    kept = {k for k, _, _ in chosen}
    left = [(k, r) for k, a, b in usable for r in (a, b) if k not in kept and disturbed(r)]
    hit = [(k, r) for k, a, b in chosen for r in (a, b) if disturbed(r)]
    shaky = sorted({r.run_id for _, a, b in chosen for r in (a, b) if unsteady(r)})
    text = f"{label} {found.text()}"
    if shaky:
        text += f"; {len(shaky)} unsteady run{'s' if len(shaky) != 1 else ''} kept"
    for k, r in left:
        text += (
            f"\n  round {k + 1} left out: {run_name(r)} ({r.run_id}) was disturbed: {'; '.join(disturbance_causes(r))}"
        )
    if hit:
        text += (
            f"\n  [disturbed: fewer than {MIN_CLEAN_ROUNDS} clean rounds, read from every round; by "
            + "; ".join(f"round {k + 1} {run_name(r)}: {', '.join(causes_of(r))}" for k, r in hit)
            + " (each run's causes above)]"
        )
    data = {
        "label": label,
        **found.as_dict(),
        "rounds_left_out": sorted({k + 1 for k, _ in left}),
        "disturbed_rounds_kept": sorted({k + 1 for k, _ in hit}),
        "unsteady_runs": shaky,
    }
    return Line(text, bool(hit), data)


def causes_of(result: Result) -> list[str]:
    """The signals that named a disturbed run's causes (cpu, io, traffic, ...)."""
    causes = disturbance_record(result).get("causes")
    return [str(c.get("signal")) for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


def figure_lines(
    arms: list[Arm], runs: dict[tuple[int, Arm], Result], rank_counts: list[int], first_round_only: bool = False
) -> list[Line]:
    """The engine ratio at each rank count and each engine's same-cores efficiency, from the rounds."""
    rounds = sorted({k for k, _ in runs} if not first_round_only else {0})

    def pairs(a: Arm, b: Arm) -> list[tuple[int, Result, Result]]:
        return [(k, runs[k, a], runs[k, b]) for k in rounds if (k, a) in runs and (k, b) in runs]

    lines = []
    after = " after round 1" if first_round_only else ""
    for framework in dict.fromkeys(a.framework for a in arms):
        engines = ENGINES[framework]
        for n in rank_counts:
            line = paired_figure(
                f"{framework} x{n}: {engines[0]}/{engines[1]} throughput ratio{after}",
                pairs(Arm(framework, engines[0], n), Arm(framework, engines[1], n)),
            )
            if line is not None:
                lines.append(line)
        one = min(rank_counts)
        for n in (n for n in rank_counts if n > one):
            for engine in engines:
                label = (
                    f"{framework} {engine} x{n}: the ranks share this host's cores: same-cores efficiency "
                    f"(total throughput at {n} ranks / at {one}){after}"
                )
                both = pairs(Arm(framework, engine, n), Arm(framework, engine, one))
                line = paired_figure(label, both)
                if line is None:
                    continue
                per_rank = line.data["ratio"] * one / n
                beside = (
                    f"\n  per-rank scaling efficiency {per_rank:.2f}, which counts each rank as if it had the "
                    f"{one}-rank run's cores: ~{one / n:.2f} by construction"
                )
                if (impossible := impossible_same_cores(line.data["ratio"], n)) is not None:
                    beside += f"\n  flagged: {impossible}"
                lines.append(Line(line.text + beside, line.marked, {**line.data, "per_rank_efficiency": per_rank}))
    return lines


def run_entry(key: tuple[int, Arm], r: Result) -> dict:
    return {
        "round": key[0] + 1,
        "arm": str(key[1]),
        "run_id": r.run_id,
        "status": r.status,
        "total_img_per_s": r.figure,
        "disturbance": disturbance_line(r),
        "disturbed": disturbed(r),
        "unsteady": unsteady(r),
    }


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
