"""The GPU check behind benchmarks/gpu_check.sh (which picks the Python; see its header).

    benchmarks/gpu_check.sh [--cpu [--full] [--skip-probes]] [--out DIR] [--budget-s N] [--only LABELS] [--archive FILE.tar.gz]

Steps, each recorded with its status (ok | failed | absent | skipped) and, where
not ok, the reason:
1. environment: what this Python and this host offer (torch, CUDA, NCCL,
   torchvision, TensorFlow, Horovod, torchrun/mpirun/horovodrun, nvidia-smi);
2. captures: `nvidia-smi -q`, `nvidia-smi topo -m` and `nvidia-smi --query-gpu=...`
   (absent with --cpu, or where nvidia-smi is missing), parsed by launch.site.probe; then the
   GPU's state (clocks, clock-event reasons, compute processes) idle, beside one load process
   and beside two (~40 s), under captures/gpu_states/;
3. probes (benchmarks/gpu_probes.py), each under a hard deadline: a one-rank NCCL
   all_reduce (gloo with --cpu; ~10 s, its NCCL log kept in nccl/probe-collective.log),
   then ResNet-50's compute-only img/s with no process group at all (~30 s; absent without
   torchvision), so a failed NCCL still leaves a figure;
4. runs: `fabric-bench run --launcher local` for torch DDP (NCCL on a GPU) x
   ResNet-50, VGG-16, Inception-v3 x fp32, AMP, one rank each at batch 256 (the
   default on GPUs); ResNet-50 fp32 again at batch 64 (the batch comparison); two
   DDP ranks sharing the one GPU (NCCL_HOSTID per rank: NCCL's network transport
   carries their exchange for real); the harness's allreduce (torch/NCCL, device
   buffers, two ranks on the GPU) and, where a site put it on PATH, nccl-tests'
   all_reduce_perf with its own conventions beside it; a Horovod run; TF
   ResNet-50 fp32 and mixed. Each writes
   result.json in the bundle's format under
   runs/<label>/. Where the launch CLI cannot be imported (typer, rich, psutil or
   scipy missing), torch runs fall back to the bench program under torchrun and
   are summarised from their rank records;
5. summary.json / summary.md: img/s, compute-only img/s, and the predictor's
   compute step (launch.predict.model: batch x ranks / compute-only img/s) per model.

Each step has a time limit (gpu_check_plan.STEP_LIMITS_S); on a GPU they add up to 300 s
(GPU_CHECK_LIMIT_S), counted from the start of benchmarks/gpu_check.sh: the whole check fits
5 minutes, so a second try fits a 15-minute slot. A step that ends early leaves its time to the
next; the runs take what is left, in order of importance, and the tail the time does not reach is
recorded as skipped. A hard deadline (--deadline-s; by default the limits' sum) ends whatever step
is running, silent or not, and still writes the summary.

What this Python or host lacks is an "absent" line with the reason, one per part (a bare host:
torch and what it requires only, no torchvision, pydantic, scipy, mpi4py, typer, rich, psutil or
Apptainer): the check imports only the standard library and plain modules of the bundle until a
step needs more, runs torch's programs under torchrun where the launch CLI cannot be imported,
and starts the harness's allreduce under torchrun with the torch backend (no mpirun, no mpi4py)
unless the launch CLI, mpirun and mpi4py are all here.

Its parts, one concept each: gpu_check_plan (the runs, their sizes and command lines),
gpu_check_host (what this Python and host offer), gpu_check_captures (nvidia-smi, the GPU's
states), gpu_check_process (the log, one command under a deadline), gpu_check_steps (the
probes and runs), gpu_check_summary (each step's entry, summary.json / summary.md).
Beside the standard library they import only plain modules of the bundle (launch.site.probe,
launch.results.transport, ...): the check must report, not crash, whatever is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# the check's parts (benchmarks/gpu_check_*.py), after the bundle is importable
from benchmarks.gpu_check_captures import capture, capture_gpu_states  # noqa: E402
from benchmarks.gpu_check_host import discover  # noqa: E402
from benchmarks.gpu_check_plan import RUN_LIMIT_S, RUN_START_MARGIN_S, STEP_LIMITS_S, planned_runs  # noqa: E402
from benchmarks.gpu_check_process import Log  # noqa: E402
from benchmarks.gpu_check_steps import PROBES, check_env, run_all, run_probes  # noqa: E402
from benchmarks.gpu_check_summary import write_summary  # noqa: E402


def started_at() -> float:
    """time.monotonic() when benchmarks/gpu_check.sh started (GPU_CHECK_STARTED, epoch seconds):
    finding a Python counts against the check's time too."""
    try:
        wall = float(os.environ.get("GPU_CHECK_STARTED", ""))
    except ValueError:
        return time.monotonic()
    return time.monotonic() - max(0.0, min(time.time() - wall, 3600.0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="benchmarks/gpu_check.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cpu", action="store_true", help="no GPU: tiny sizes, gloo, nvidia-smi captures absent")
    p.add_argument("--out", type=Path, default=None, help="output folder (default results/gpu-check-<UTC time>)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help=f"start no run after this many seconds (default: {RUN_START_MARGIN_S} s before the deadline)",
    )
    p.add_argument(
        "--run-timeout-s",
        type=float,
        default=None,
        help=f"kill one run after this ({RUN_LIMIT_S['gpu']} / {RUN_LIMIT_S['cpu']})",
    )
    p.add_argument("--archive", type=Path, default=None, help="also write the output folder as this .tar.gz")
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="end the whole check after this many seconds, writing the summary (the steps' limits' sum: "
        f"{sum(STEP_LIMITS_S['gpu'].values()):.0f} / {sum(STEP_LIMITS_S['cpu'].values()):.0f})",
    )
    p.add_argument("--full", action="store_true", help="with --cpu: every model in both precisions")
    p.add_argument(
        "--skip-probes",
        action="store_true",
        help="with --cpu: leave out the collective and compute probes (recorded as skipped), for a check of the runs alone",
    )
    p.add_argument(
        "--only", default=None, help="comma list of run labels to run (see summary.md), e.g. torch-ddp-resnet50-fp32"
    )
    args = p.parse_args(argv)
    mode = "cpu" if args.cpu else "gpu"
    if args.skip_probes and mode != "cpu":
        p.error("--skip-probes goes with --cpu (on a GPU the probes are the check's fallback figures)")
    only = {label for label in (args.only or "").split(",") if label}
    unknown = only - {run.label for run in planned_runs()}
    if unknown:
        p.error(
            f"unknown run label(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(run.label for run in planned_runs())}"
        )
    out = (args.out or REPO / "results" / time.strftime("gpu-check-%Y%m%dT%H%M%SZ", time.gmtime())).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "tmp").mkdir(exist_ok=True)
    log = Log(out / "gpu_check.log")
    started, limits = started_at(), STEP_LIMITS_S[mode]
    deadline = started + (args.deadline_s or sum(limits.values()))
    log(f"gpu_check: {mode} mode, output under {out}; steps' limits {limits} (s)")
    for line in os.environ.get("GPU_CHECK_FOUND", "").strip().splitlines():
        log(f"  {line}")
    info = discover(log, max(5.0, min(limits["environment"], deadline - time.monotonic())))
    (out / "environment.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if mode == "gpu" and info.get("torch") and not info.get("cuda_available"):
        log("gpu_check: torch sees no CUDA device here; the runs go ahead on what there is (try --cpu)")
    captured = capture(mode, out, log, limits["captures"])
    try:
        until = min(time.monotonic() + limits["gpu_states"], deadline)
        gpu_states = capture_gpu_states(mode, info, out, check_env(mode, out), log, until)
    except Exception as exc:  # the captures are an extra: the runs go ahead without them
        gpu_states = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        log(f"gpu state captures: failed ({gpu_states['reason']})")
    if args.skip_probes:
        probes = {name: {"status": "skipped", "reason": "--skip-probes"} for name in PROBES}
        log(f"probes: skipped ({', '.join(PROBES)}: --skip-probes)")
    else:
        probes = run_probes(mode, info, out, check_env(mode, out), deadline, log)
    entries = run_all(
        mode,
        info,
        out,
        args.budget_s or (deadline - started - RUN_START_MARGIN_S),
        args.run_timeout_s or RUN_LIMIT_S[mode],
        log,
        started,
        args.full,
        only,
        deadline,
    )
    captured["gpu_states"] = gpu_states
    summary = write_summary(out, mode, info, captured, entries, time.monotonic() - started, probes, limits)
    shutil.rmtree(out / "tmp", ignore_errors=True)
    log((out / "summary.md").read_text())
    if args.archive:
        archive = args.archive.resolve()
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(out, arcname=out.name, filter=lambda m: None if m.name.endswith(archive.name) else m)
        log(f"gpu_check: archive {archive}")
    log(f"gpu_check: summary {out / 'summary.md'}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
