"""The GPU check behind benchmarks/gpu_check.sh (which picks the Python; see its header).

    benchmarks/gpu_check.sh [--cpu [--full]] [--out DIR] [--budget-s N] [--only LABELS] [--archive FILE.tar.gz]

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
   then ResNet-50's compute-only img/s with no process group at all (~30 s), so a
   failed NCCL still leaves a figure;
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
   compute step (launch.results.model: batch x ranks / compute-only img/s) per model.

A hard deadline (--deadline-s; 470 s on a GPU) ends whatever step is running, silent
or not, marks the steps not reached as skipped and still writes the summary.
Expected on one H200 with 16 cores: environment ~20 s, captures ~5 s, probes ~40 s,
each 1-rank run 30-50 s, the 2-rank run ~60 s, each TF run ~60 s.

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
from benchmarks.gpu_check_plan import planned_runs  # noqa: E402
from benchmarks.gpu_check_process import Log  # noqa: E402
from benchmarks.gpu_check_steps import check_env, run_all, run_probes  # noqa: E402
from benchmarks.gpu_check_summary import write_summary  # noqa: E402

DEFAULT_BUDGET_S = {"gpu": 360, "cpu": 900}  # GPU: the last run ends by ~7.5 min
DEFAULT_RUN_TIMEOUT_S = {"gpu": 150, "cpu": 300}
DEFAULT_DEADLINE_S = {"gpu": 470, "cpu": 1500}  # the whole check, hard: a lent machine gives 8 minutes


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
        help="start no run after this many seconds (default 360 on a GPU, 900 with --cpu)",
    )
    p.add_argument("--run-timeout-s", type=float, default=None, help="kill one run after this (150 / 300)")
    p.add_argument("--archive", type=Path, default=None, help="also write the output folder as this .tar.gz")
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="end the whole check after this many seconds, writing the summary (470 / 1500)",
    )
    p.add_argument("--full", action="store_true", help="with --cpu: every model in both precisions")
    p.add_argument(
        "--only", default=None, help="comma list of run labels to run (see summary.md), e.g. torch-ddp-resnet50-fp32"
    )
    args = p.parse_args(argv)
    mode = "cpu" if args.cpu else "gpu"
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
    started = time.monotonic()
    log(f"gpu_check: {mode} mode, output under {out}")
    for line in os.environ.get("GPU_CHECK_FOUND", "").strip().splitlines():
        log(f"  {line}")
    info = discover(log)
    (out / "environment.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if mode == "gpu" and info.get("torch") and not info.get("cuda_available"):
        log("gpu_check: torch sees no CUDA device here; the runs go ahead on what there is (try --cpu)")
    deadline = started + (args.deadline_s or DEFAULT_DEADLINE_S[mode])
    captured = capture(mode, out, log)
    try:
        gpu_states = capture_gpu_states(mode, info, out, check_env(mode, out), log)
    except Exception as exc:  # the captures are an extra: the runs go ahead without them
        gpu_states = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        log(f"gpu state captures: failed ({gpu_states['reason']})")
    probes = run_probes(mode, info, out, check_env(mode, out), deadline, log)
    entries = run_all(
        mode,
        info,
        out,
        args.budget_s or DEFAULT_BUDGET_S[mode],
        args.run_timeout_s or DEFAULT_RUN_TIMEOUT_S[mode],
        log,
        started,
        args.full,
        only,
        deadline,
    )
    captured["gpu_states"] = gpu_states
    summary = write_summary(out, mode, info, captured, entries, time.monotonic() - started, probes)
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
