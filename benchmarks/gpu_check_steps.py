"""The GPU check's steps that run something (benchmarks/gpu_check.py): the probes
(benchmarks/gpu_probes.py) and the planned runs, each under its timeout and the check's deadline."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchmarks.gpu_check_plan import (
    CPU_SKIPPED,
    PROBE_LIMITS_S,
    RUN_START_MARGIN_S,
    allreduce_by_torchrun,
    allreduce_direct_argv,
    direct_argv,
    direct_env,
    fabric_bench_argv,
    nccl_tests_argv,
    planned_runs,
    unavailable,
)
from benchmarks.gpu_check_process import REPO, Log, execute
from benchmarks.gpu_check_summary import (
    from_allreduce_records,
    from_allreduce_result,
    from_nccl_tests,
    from_records,
    from_result,
    keep_nccl_lines,
    why_lines,
)
from launch.ranks.reporting import NCCL_REPORTING_ENV  # standard library only
from launch.results import transport  # reading a log: standard library only

# the compute probe's batch, image size, warm-up and timed iterations
PROBE_SIZES = {"gpu": ("64", "224", "5", "10"), "cpu": ("2", "32", "0", "2")}
PROBES = ("collective", "compute")


def probe_unavailable(name: str, info: dict) -> str | None:
    """Why a probe cannot start here, or None: both need torch, the compute probe torchvision's ResNet-50."""
    if not info.get("torch"):
        return f"torch is not importable by {info.get('python')}: {info.get('torch_error', 'absent')}"
    if name == "compute" and not info.get("torchvision"):
        return f"torchvision is not importable by {info.get('python')} (ResNet-50 comes from it)"
    return None


def run_probes(mode: str, info: dict, out: Path, env: dict, deadline: float, log: Log) -> dict:
    """The collective and compute probes (benchmarks/gpu_probes.py), each under its own timeout
    and the check's deadline; their output kept under probes/."""
    folder = out / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    probes: dict[str, dict] = {}
    for name, extra in zip(PROBES, ((), PROBE_SIZES[mode])):
        why = probe_unavailable(name, info)
        if why:
            probes[name] = {"status": "absent", "reason": why}
            log(f"probe {name}: absent ({why})")
            continue
        left = deadline - time.monotonic()
        if left < 10:
            probes[name] = {"status": "skipped", "reason": "the check's deadline was reached"}
            log(f"probe {name}: skipped (deadline)")
            continue
        timeout_s = min(PROBE_LIMITS_S[mode][name], left)
        log(f"probe {name}: (at most {timeout_s:.0f} s)")
        console = folder / f"{name}.log"
        probe_env = {**env, **(NCCL_REPORTING_ENV if mode == "gpu" else {})}
        code = execute(
            [sys.executable, str(REPO / "benchmarks" / "gpu_probes.py"), name, *extra],
            console,
            probe_env,
            timeout_s,
            log,
        )
        text = console.read_text(errors="replace")
        line = next((l for l in text.splitlines() if l.startswith("GPU_PROBE ")), None)
        entry: dict = json.loads(line.split(" ", 1)[1]) if line else {}
        ok = code == 0 and entry.get("ok", True) and bool(line)
        entry.update(
            status="ok" if ok else "failed",
            log=f"probes/{name}.log",
            reason=None
            if ok
            else (
                "timed out" if code == 124 else f"exit code {code}, no result line" if not line else f"exit code {code}"
            ),
        )
        if not ok:
            entry["errors"] = why_lines(text, nccl_warnings=True)
        keep_nccl_lines(console, out / "nccl" / f"probe-{name}.log", entry)
        probes[name] = entry
        log(
            f"probe {name}: {entry['status']}"
            + (f" ({entry['reason']})" if entry.get("reason") else "")
            + (f", {entry['img_per_s']:.1f} img/s compute-only" if entry.get("img_per_s") else "")
        )
    return probes


def check_env(mode: str, out: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "FABRIC_BENCH_STORE": str(out / "results.sqlite"),
        "PYTHONUNBUFFERED": "1",
        "KERAS_HOME": str(out / "tmp" / "keras"),
        "MPLCONFIGDIR": str(out / "tmp" / "matplotlib"),
    }
    if mode == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_all(
    mode: str,
    info: dict,
    out: Path,
    budget_s: float,
    run_timeout_s: float,
    log: Log,
    started: float,
    full: bool = False,
    only: set[str] | None = None,
    deadline: float = float("inf"),
) -> list[dict]:
    env = check_env(mode, out)
    entries = []
    for run in planned_runs():
        if only and run.label not in only:
            continue
        entry = {
            "label": run.label,
            "framework": run.framework,
            "engine": run.engine,
            "model": run.model,
            "precision": run.precision,
            "ranks": run.ranks,
        }
        entries.append(entry)
        why = unavailable(run, info)
        elapsed = time.monotonic() - started
        if mode == "cpu" and not full and run.label in CPU_SKIPPED and not why:
            entry.update(
                status="skipped", reason=f"--cpu: {CPU_SKIPPED[run.label]}; --full runs every model in both precisions"
            )
            log(f"run {run.label}: skipped ({entry['reason']})")
            continue
        if why:
            entry.update(status="absent", reason=why)
            log(f"run {run.label}: absent ({why})")
            continue
        if elapsed > budget_s or deadline - time.monotonic() < RUN_START_MARGIN_S:
            entry.update(
                status="skipped",
                reason=f"the check's budget of {budget_s:.0f} s (or its hard deadline) "
                f"was spent ({elapsed:.0f} s elapsed)",
            )
            log(f"run {run.label}: skipped ({entry['reason']})")
            continue
        run_dir = out / "runs" / run.label
        run_dir.mkdir(parents=True, exist_ok=True)
        timeout_s = min(run_timeout_s, max(30.0, budget_s + 60 - elapsed), deadline - time.monotonic() - 10)
        if run.benchmark == "nccl-tests":  # nccl-tests' own binary, its own conventions
            argv, run_env, console = nccl_tests_argv(info, mode), env, run_dir / "all_reduce_perf.out"
            log(f"run {run.label}: {' '.join(argv)}")
            code = execute(argv, console, run_env, min(timeout_s, deadline - time.monotonic()), log)
            from_nccl_tests(console.read_text(errors="replace"), entry, code)
            log(f"run {run.label}: {entry['status']}" + (f" ({entry['reason']})" if entry.get("reason") else ""))
            continue
        direct = not info.get("launch_cli") or (run.benchmark == "allreduce" and allreduce_by_torchrun(info))
        if not direct:
            argv, run_env = fabric_bench_argv(run, mode, info, run_dir, timeout_s), env
            console = run_dir / "fabric-bench.out"
            log(f"run {run.label}: fabric-bench {' '.join(argv[3:])}")
        else:  # under torchrun, told what fabric-bench would tell the ranks (launch's reporting variables too)
            shutil.rmtree(run_dir / "ranks", ignore_errors=True)  # records append: none from an earlier check
            argv = (
                allreduce_direct_argv(run, mode, run_dir)
                if run.benchmark == "allreduce"
                else direct_argv(run, mode, run_dir)
            )
            console = run_dir / "output.log"
            run_env = {**env, **direct_env(run, mode), **(NCCL_REPORTING_ENV if mode == "gpu" else {})}
            log(f"run {run.label}: {' '.join(argv)}")
        t0 = time.monotonic()
        before = set(run_dir.glob("*/result.json"))  # an --out used before keeps its earlier runs
        code = execute(argv, console, run_env, min(timeout_s + (0 if direct else 30), deadline - time.monotonic()), log)
        results = sorted(set(run_dir.glob("*/result.json")) - before)
        if direct:
            from bench.record import read_records

            records = read_records(run_dir / "ranks")
            if run.benchmark == "allreduce":
                from_allreduce_records(records, entry, code)
            else:
                from_records(records, entry, code)
            entry["started_by"] = "torchrun (no launch CLI)" if not info.get("launch_cli") else "torchrun"
            run_log = run_dir / "output.log"
            entry["nccl"] = transport.observe(run_log.read_text(errors="replace")).get("nccl")
        elif results and run.benchmark == "allreduce":
            from_allreduce_result(json.loads(results[-1].read_text()), entry)
            entry["result"] = str(results[-1].relative_to(out))
            run_log = results[-1].parent / "output.log"
        elif results:
            from_result(json.loads(results[-1].read_text()), entry)
            entry["result"] = str(results[-1].relative_to(out))
            run_log = results[-1].parent / "output.log"
        else:
            entry.update(
                status="failed",
                reason=f"fabric-bench wrote no result.json (exit code {code}); see runs/{run.label}/fabric-bench.out",
            )
            run_log = run_dir / "fabric-bench.out"
        if not direct:
            entry["started_by"] = "fabric-bench run"
        entry.setdefault("wall_seconds", time.monotonic() - t0)
        if entry.get("status") != "ok" and run_log.exists():
            entry["errors"] = why_lines(run_log.read_text(errors="replace"))
        keep_nccl_lines(run_log, out / "nccl" / f"{run.label}.log", entry)
        log(
            f"run {run.label}: {entry['status']}"
            + (f" ({entry['reason']})" if entry.get("reason") else "")
            + (
                f", {entry['img_per_s']:.1f} img/s, compute-only {entry['compute_img_per_s']:.1f} img/s"
                if entry.get("img_per_s") and entry.get("compute_img_per_s")
                else ""
            )
        )
    return entries
