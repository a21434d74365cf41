"""Harness fidelity: our bench programs against minimal reference loops, like-for-like.

For each case, `ours` is a full `fabric-bench run` (launch.runs.run: keeper, rank
environment, records, heartbeats, the compute-only phase) and `reference` is the
framework's documented synthetic loop (benchmarks/reference/) started by the
same starter (horovodrun --gloo, mpirun or torchrun) with the same model, batch,
image size, iterations and threads (OMP_NUM_THREADS = cores / ranks), and
nothing else of ours. The two alternate within each round (the order flips every
round: benchmarks/rounds.py), so slow drifts of a shared machine hit both alike.
Printed: img/s of every run, ours/reference per round and the ratio of the means.

Cases: torch-horovod (Horovod DistributedOptimizer), torch-ddp, tf-horovod
(DistributedGradientTape; the reference runs Horovod's documented way, legacy
tf.keras with TF_USE_LEGACY_KERAS=1, while ours runs Keras 3) and
tf-horovod-keras3 (the same reference loop on Keras 3: the model code is then
the same on both sides, and only the harness differs).

The ratio's 95 % CI is a paired Student-t interval on the per-round log ratios
(each round runs both sides back to back, so a round's drift hits both).

    python benchmarks/harness_fidelity.py                       # the issue's settings (long: ~20 min on 2 cores)
    python benchmarks/harness_fidelity.py --cases torch-ddp --rounds 2 --image-size 64
    python benchmarks/harness_fidelity.py --cases torch-horovod --controller mpi --env HOROVOD_CYCLE_TIME=5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rounds import alternating, paired_ratio  # noqa: E402
from launch.errors import UsageError  # noqa: E402
from launch.ranks.launchers import Plan, mpirun_argv, tool_path  # noqa: E402
from launch.runs.run import execute_run, prepare  # noqa: E402
from launch.ranks.runspec import RunSpec  # noqa: E402
from launch.results.result import as_result, field_of  # noqa: E402
from launch.ranks.runtimes import HostRuntime  # noqa: E402

REFERENCE_DIR = ROOT / "benchmarks" / "reference"
PREFIX = "[reference]"
CASES = {  # name -> (framework, engine, reference script, reference env)
    "torch-horovod": ("torch", "horovod", "torch_horovod.py", {}),
    "torch-ddp": ("torch", "ddp", "torch_ddp.py", {}),
    "tf-horovod": ("tf", "horovod", "tf_horovod.py", {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}),
    # the same loop on Keras 3, as ours runs: the model code too is the same on both sides
    "tf-horovod-keras3": ("tf", "horovod", "tf_horovod.py", {"TF_CPP_MIN_LOG_LEVEL": "1"}),
}


def minimal_env(spec: RunSpec) -> dict[str, str]:
    """What any launch on this host needs, and the same threads per rank as ours."""
    env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // spec.ranks)), "PYTHONUNBUFFERED": "1"}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def reference_argv(spec: RunSpec, script: str, env: dict[str, str]) -> list[str]:
    program = [
        sys.executable,
        str(REFERENCE_DIR / script),
        "--model",
        spec.model,
        "--batch-size",
        str(spec.batch_size),
        "--image-size",
        str(spec.effective_image_size),
        "--warmup",
        str(spec.warmup),
        "--iters",
        str(spec.iters),
        "--batches-per-iter",
        str(spec.batches_per_iter),
    ]
    n = str(spec.ranks)
    if spec.engine == "ddp":
        return [tool_path("torchrun"), "--standalone", "--nnodes", "1", "--nproc-per-node", n, *program[1:]]
    if spec.controller == "gloo":
        return [tool_path("horovodrun"), "-np", n, "-H", f"localhost:{n}", "--gloo", *program]
    plan = Plan(record_dir=Path("/nonexistent"), runtime=HostRuntime())
    return mpirun_argv(spec, plan, env, tool_path("mpirun")) + program


def run_reference(spec: RunSpec, script: str, extra: dict[str, str], log: Path) -> float | None:
    env = {**minimal_env(spec), **extra}
    argv = reference_argv(spec, script, env)
    proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=1800)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(argv)}\n{proc.stdout}\n{proc.stderr}", encoding="utf-8")
    for line in proc.stdout.splitlines():
        if PREFIX in line:
            return json.loads(line.split(PREFIX, 1)[1])["total_img_per_s"]
    print(f"  reference failed (exit {proc.returncode}); see {log}", flush=True)
    return None


def run_ours(spec: RunSpec, results: Path) -> float | None:
    result = as_result(execute_run(spec, prepare(spec, results), timeout=1800, echo=False))
    if result.status != "ok":
        print(f"  ours failed: {field_of(result, 'reason')}", flush=True)
        return None
    return result.figure  # its kind's figure of merit: img/s


def paired_ci(pairs: list[tuple[float, float]]) -> str:
    """Geometric mean of the per-round ratios ours/reference, its paired 95 % CI (benchmarks/rounds.py)
    and what it shows."""
    found = paired_ratio(pairs)
    if found is None or found.low is None or found.high is None:
        return "(one round: no CI)"
    low, high = found.low, found.high
    shown = "ours faster" if low > 1 else "ours slower" if high < 1 else "no significant difference"
    return f"paired {found.ratio:.3f}, 95 % CI [{low:.3f}, {high:.3f}]: {shown}"


def parse_env(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--tf-model", default="ResNet50")
    p.add_argument("--tf-batch-size", type=int, default=4)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--batches-per-iter", type=int, default=2)
    p.add_argument("--controller", default="gloo", choices=("gloo", "mpi"), help="Horovod's, for both sides")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for our runs only (profiling)")
    p.add_argument("--results", type=Path, default=Path("results/harness_fidelity"))
    args = p.parse_args()
    cases = args.cases.split(",")
    if set(cases) - set(CASES):
        print(
            f"error: unknown cases {sorted(set(cases) - set(CASES))}; choose from {', '.join(CASES)}", file=sys.stderr
        )
        return 2
    ours_env = parse_env(args.env)
    table = []
    try:
        for case in cases:
            framework, engine, script, ref_env = CASES[case]
            tf = framework == "tf"
            spec = RunSpec(
                framework=framework,
                engine=engine,
                ranks=args.ranks,
                controller=args.controller,
                model=args.tf_model if tf else args.model,
                batch_size=args.tf_batch_size if tf else args.batch_size,
                image_size=args.image_size,
                warmup=args.warmup,
                iters=args.iters,
                batches_per_iter=args.batches_per_iter,
                extra_env=ours_env,
            )
            ours: list[float | None] = []
            theirs: list[float | None] = []
            for round_, side in alternating(("ours", "reference"), args.rounds):
                if side == "ours":
                    value = run_ours(spec, args.results)
                else:
                    log = args.results / f"reference-{case}-{time.time():.0f}.log"
                    value = run_reference(spec, script, ref_env, log)
                (ours if side == "ours" else theirs).append(value)
                shown = f"{value:7.2f} img/s" if value else "failed"
                print(f"{case} round {round_ + 1} {side:<9} {shown}", flush=True)
            table.append((case, spec, ours, theirs))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"\nours/reference, {args.ranks} ranks, like-for-like (same starter, model, batch, threads), "
        f"controller {args.controller}" + (f", ours with {ours_env}" if ours_env else "")
    )
    ok = True
    for case, spec, ours, theirs in table:
        pairs = [(a, b) for a, b in zip(ours, theirs) if a and b]
        if not pairs:
            print(f"{case:<14} failed")
            ok = False
            continue
        rounds = " ".join(f"{a / b:.3f}" for a, b in pairs)
        ratio = statistics.mean(a for a, _ in pairs) / statistics.mean(b for _, b in pairs)
        print(
            f"{case:<17} {spec.model} b{spec.batch_size} {spec.effective_image_size}px: ours "
            f"{statistics.mean(a for a, _ in pairs):7.2f}  reference {statistics.mean(b for _, b in pairs):7.2f} "
            f"img/s  ratio {ratio:.3f}  (rounds: {rounds})  {paired_ci(pairs)}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
