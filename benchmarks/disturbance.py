"""The planted battery: does the disturbance record name what was done to a run?

Quiet runs and runs with one planted cause each, interleaved (every round runs every cause
once, the order rotated round by round), all real: real ranks, real /proc, real processes.

    quiet     nothing planted (on a shared machine others' work still counts: see below)
    cpu       one busy process pinned to each of the run's cores, for the whole run (right only
              where the sampler names those processes among the busiest)
    memory    a process in a 48 MiB memory cgroup writing and reading a 200 MiB file over and
              over: the kernel reclaims for it, and tasks stall on memory (PSI)
    stopped   the last rank SIGSTOPped for STOP_S seconds in its timed phase, then SIGCONT
    traffic   iperf3 between the two emulated nodes of an emulated-launcher run (needs root,
              ip netns and iperf3); its quiet control is an emulated run with nothing planted
    disk      `dd oflag=direct` rewriting one 64 MiB file beside the run (the I/O signal)
    loopback  a TCP pair on 127.0.0.1 pushing bytes beside a one-node run (its ranks exchange
              through the loopback: the traffic signal counts it beyond their own)
    rate-limited  node n1's egress shaped to a quarter of its link for the run, on a 2-node
              emulated Slurm cluster (srun; every node sampled on its own: needs root and
              slurm-wlm); right only where n1 is the node named; its quiet control is a
              run on the same cluster with nothing planted

The local causes run at one of three settings (`--settings`): the battery's own (a 2-rank
DDP run), `make bench`'s (benchmarks/train_engines.py's workload, its four arms in turn: ddp and
horovod at 1 and 2 ranks) or the README's first sweep's (experiments/cpu-small: the same arms at
its tiny workload).

It prints the confusion matrix (planted cause x signal named), the share of planted runs
named with the right cause, the share of quiet runs flagged (disturbed), the share of quiet runs
that were unsteady (kept: their own steps varied), and for every flagged quiet run what the
sampler named (others' processes on a shared machine are real disturbances the battery did not
plant). The machine's load (/proc/loadavg) before every run is printed too.

Last, the verdict a planted disturbance flips when the record is ignored and that comes out
right when it is used (benchmarks/disturbance_verdict.py; --verdict-repetitions 0 leaves it out).

    python benchmarks/disturbance.py                       # 3 rounds of every cause, the verdict
    python benchmarks/disturbance.py --rounds 1 --causes quiet,cpu,stopped --verdict-repetitions 0 --json out.json
    python benchmarks/disturbance.py --rounds 0 --verdict-repetitions 4
    python benchmarks/disturbance.py --settings bench --rounds 30 --causes quiet --verdict-repetitions 0
    python benchmarks/disturbance.py --settings bench --rounds 5 --causes quiet,cpu,disk,loopback,stopped,memory
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# the battery's parts (benchmarks/planting.py, benchmarks/disturbance_verdict.py)
from benchmarks.disturbance_verdict import demonstrate, print_demonstration  # noqa: E402
from benchmarks.planting import (  # noqa: E402
    HOG_NAME,
    background_traffic,
    cpu_hogs,
    disk_writes,
    loopback_traffic,
    memory_pressure,
    rate_limited_node,
    slurm_cluster,
    stopped_rank,
)
from benchmarks import train_engines  # noqa: E402
from launch.disturbance.judge import SIGNALS  # noqa: E402
from launch.errors import UsageError  # noqa: E402
from launch.fleet.emulate import slurm_nodes  # noqa: E402
from launch.runs.run import execute_run, prepare  # noqa: E402
from launch.ranks.runspec import RunSpec  # noqa: E402
from launch.results.result import as_result, typed  # noqa: E402

if TYPE_CHECKING:
    from launch.fleet.emulate.cluster import Cluster
    from launch.site.config import Site

    SlurmCluster = tuple[Cluster, Site]  # an emulated Slurm cluster and its site (planting.slurm_cluster)
from launch.schema import Disturbance  # noqa: E402

CAUSES = ("quiet", "cpu", "memory", "disk", "loopback", "stopped", "traffic", "rate-limited")
# planted -> signal
RIGHT = {
    "cpu": "cpu",
    "memory": "memory",
    "disk": "io",
    "loopback": "traffic",
    "stopped": "stopped",
    "traffic": "traffic",
    "rate-limited": "link",
}
SETTINGS = ("battery", "bench", "sweep")
SLURM_RATE = "1gbit"  # the rate-limited node's cluster: a quarter of it keeps a run under a minute
LIMITED_NODE = 1


class Workload(TypedDict):
    """The RunSpec fields every cause's run shares (spec_for)."""

    engine: str
    model: str
    image_size: int
    batch_size: int
    warmup: int
    iters: int
    batches_per_iter: int


def workload(iters: int) -> Workload:
    return {
        "engine": "ddp",
        "model": "resnet18",
        "image_size": 32,
        "batch_size": 8,
        "warmup": 2,
        "iters": iters,
        "batches_per_iter": 2,
    }


def local_arms(settings: str, iters: int | None) -> list[dict]:
    """The local runs' RunSpec fields at `settings`, one dict per arm (taken in turn)."""
    if settings == "battery":
        return [{"ranks": 2, **workload(iters or 8)}]
    if settings == "bench":  # benchmarks/train_engines.py's defaults
        common = {
            "model": train_engines.DEFAULT_MODEL["torch"],
            "image_size": 64,
            "batch_size": 32,
            "warmup": train_engines.WARMUP,
            "iters": iters or train_engines.ITERS,
            "batches_per_iter": train_engines.BATCHES_PER_ITER,
        }
    else:  # experiments/cpu-small.experiment.toml's [run]
        common = {
            "model": "resnet18",
            "image_size": 32,
            "batch_size": 8,
            "warmup": 1,
            "iters": iters or 3,
            "batches_per_iter": 2,
            "fabric": "ethernet",
        }
    return [{"engine": e, "ranks": n, **common} for n in (1, 2) for e in train_engines.ENGINES["torch"]]


def cluster_of(slurm: SlurmCluster | None, cause: str) -> SlurmCluster:
    """The emulated Slurm cluster a Slurm cause runs on (main starts it where one is asked for)."""
    if slurm is None:
        raise UsageError(f"the {cause} cause runs under Slurm: no emulated Slurm cluster was started")
    return slurm


def spec_for(cause: str, iters: int, slurm: SlurmCluster | None = None, arm: dict | None = None) -> RunSpec:
    common = workload(iters)
    if cause in ("traffic", "quiet-emulated"):
        return RunSpec(launcher="emulated", nodes=2, ranks=2, fabric="emu-eth-10g", **common)
    if cause in ("rate-limited", "quiet-slurm"):
        # the emulated nodes share this host's cores, and Slurm gives each node all of them: one
        # thread per rank, or the two ranks' threads fight for the cores (quiet runs read steps 3x the median)
        partition, threads = cluster_of(slurm, cause)[1].scheduler.partition, {"OMP_NUM_THREADS": "1"}
        return RunSpec(
            launcher="srun", nodes=2, ranks=2, fabric="ethernet", partition=partition, extra_env=threads, **common
        )
    return RunSpec(**(arm or {"ranks": 2, **common}))


# ------------------------------------------------------------------ one run


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_one(cause: str, results: Path, iters: int, slurm: SlurmCluster | None = None, arm: dict | None = None) -> dict:
    """One run with `cause` planted; `slurm`: (cluster, site) of the emulated Slurm cluster; `arm`:
    a local run's fields (local_arms)."""
    spec = spec_for(cause, iters, slurm, arm)
    prepared = prepare(spec, results, cluster_of(slurm, cause)[1] if spec.launcher == "srun" else None)
    planted_pids: list[int] = []
    done: dict = {}
    load = load_average()
    plant: contextlib.AbstractContextManager[None]
    if cause == "cpu":
        plant = cpu_hogs(planted_pids)
    elif cause == "memory":
        plant = memory_pressure(planted_pids)
    elif cause == "disk":
        plant = disk_writes(planted_pids, results)
    elif cause == "loopback":
        plant = loopback_traffic(planted_pids)
    elif cause == "stopped":
        plant = stopped_rank(prepared.plan.record_dir, spec.warmup, done)
    elif cause == "traffic":
        plant = background_traffic(prepared.plan.emulated_cluster, planted_pids, done)
    elif cause == "rate-limited":
        plant = rate_limited_node(cluster_of(slurm, cause)[0], LIMITED_NODE)
    else:
        plant = contextlib.nullcontext()
    with plant:
        result = execute_run(spec, prepared, timeout=600, echo=False)
    run, fields = as_result(result), typed(result)
    record = fields.disturbance if fields is not None and fields.disturbance is not None else Disturbance()
    signals = record.signals or {}
    cpu = signals.get("cpu") or {}
    return {
        "cause": cause,
        "arm": f"{spec.engine} x{spec.ranks}",
        "run_id": run.run_id,
        "status": run.status,
        "load_1min": load,
        "verdict": record.verdict,
        "steadiness": record.steadiness,
        "unsteady_because": list(record.unsteady_because or []),
        "named": sorted({str(c.signal) for c in record.causes or []}),
        "words": [str(c.words) for c in record.causes or []],
        "other_cores": cpu.get("other_cores"),
        "top": cpu.get("top"),
        "planted_pids": planted_pids,
        "stopped_pid": done.get("pid"),
        "traffic_started": done.get("started"),
        "rank_pids": sorted({r["pid"] for r in rank_records(prepared.plan.record_dir)}),
        "sampler": record.sampler,
        "rate_limited": (signals.get("link") or {}).get("rate_limited"),
        "nodes": sorted(record.nodes or {}),
    }


def rank_records(record_dir: Path) -> list[dict]:
    out = []
    for path in record_dir.glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return [r for r in out if isinstance(r.get("pid"), int)]


# ------------------------------------------------------------------ the figures


def named_right(run: dict) -> bool:
    """The planted cause's signal is named; for busy processes, the planted ones are among the
    processes named (on a shared machine others' work alone can make the cpu signal fire)."""
    if RIGHT[run["cause"]] not in run["named"]:
        return False
    if run["cause"] == "rate-limited":  # the shaped node, and only it
        return run.get("rate_limited") == [f"n{LIMITED_NODE}"]
    return run["cause"] != "cpu" or any(t.get("name") == HOG_NAME for t in run.get("top") or [])


def confusion(runs: list[dict]) -> dict:
    planted = [c for c in CAUSES if any(r["cause"].startswith(c) for r in runs)]
    matrix = {c: {s: 0 for s in (*SIGNALS, "none")} for c in planted}
    counts = {c: 0 for c in planted}
    for r in runs:
        cause = "quiet" if r["cause"].startswith("quiet") else r["cause"]
        counts[cause] += 1
        for signal_ in r["named"] or ["none"]:
            matrix[cause][signal_] += 1
    planted_runs = [r for r in runs if r["cause"] in RIGHT]
    right = [r for r in planted_runs if named_right(r)]
    quiet = [r for r in runs if r["cause"].startswith("quiet")]
    flagged = [r for r in quiet if r["verdict"] == "disturbed"]
    return {
        "matrix": matrix,
        "runs": counts,
        "planted_runs": len(planted_runs),
        "named_right": len(right),
        "quiet_runs": len(quiet),
        "quiet_flagged": len(flagged),
        "quiet_unsteady": len([r for r in quiet if r.get("steadiness") == "unsteady"]),
        "quiet_flagged_by": [
            {"run_id": r["run_id"], "load_1min": r["load_1min"], "words": r["words"]} for r in flagged
        ],
        "missed": [
            {"run_id": r["run_id"], "cause": r["cause"], "named": r["named"], "words": r["words"]}
            for r in planted_runs
            if r not in right
        ],
    }


def print_figures(runs: list[dict], figures: dict, started_load: str, ended_load: str) -> None:
    columns = (*SIGNALS, "none")
    print("\nconfusion matrix: planted cause (rows) x signal named (columns; a run may name several)")
    print(f"{'planted':<13} {'runs':>4} " + " ".join(f"{c:>8}" for c in columns))
    for cause, row in figures["matrix"].items():
        print(f"{cause:<13} {figures['runs'][cause]:>4} " + " ".join(f"{row[c]:>8}" for c in columns))
    if figures["planted_runs"]:
        share = figures["named_right"] / figures["planted_runs"]
        print(
            f"named with the right cause: {figures['named_right']} of {figures['planted_runs']} planted runs "
            f"({share:.0%}; target >= 95 %)"
        )
    if figures["quiet_runs"]:
        share = figures["quiet_flagged"] / figures["quiet_runs"]
        print(f"quiet runs flagged: {figures['quiet_flagged']} of {figures['quiet_runs']} ({share:.0%}; target <= 5 %)")
        print(
            f"quiet runs unsteady (kept, not flagged: their own steps varied): {figures['quiet_unsteady']} of "
            f"{figures['quiet_runs']}"
        )
    for miss in figures["missed"]:
        print(f"  missed {miss['cause']}: {miss['run_id']} named {miss['named'] or 'nothing'}: {miss['words']}")
    for flag in figures["quiet_flagged_by"]:
        print(f"  quiet run flagged: {flag['run_id']} (load {flag['load_1min']:.2f}): {'; '.join(flag['words'])}")
    loads = [r["load_1min"] for r in runs]
    print(
        f"machine load (1-min average before each run): {min(loads):.2f} - {max(loads):.2f}, "
        f"mean {sum(loads) / len(loads):.2f} on {os.cpu_count()} cores"
    )
    print(f"uptime at the start: {started_load}\nuptime at the end:   {ended_load}")
    costs = [r["sampler"] for r in runs if r.get("sampler") and r["sampler"].get("share_of_a_core") is not None]
    if costs:
        share = sorted(c["share_of_a_core"] for c in costs)
        per = sorted(c["per_snapshot_ms"] for c in costs)
        print(
            f"sampler cost: median {share[len(share) // 2]:.2%} of a core (range {share[0]:.2%} - {share[-1]:.2%}), "
            f"{per[len(per) // 2]:.2f} ms per snapshot, every "
            + (f"{costs[0]['shortest_interval_s']:g}-" if costs[0].get("shortest_interval_s") else "")
            + f"{costs[0]['interval_s']:g} s"
        )


def rounds(
    causes: list[str], count: int, results: Path, iters: int, slurm: SlurmCluster | None, arms: list[dict]
) -> list[dict]:
    """Every cause once a round, the order rotated round by round, each local run on the next of
    `arms` in turn; each run printed as it ends."""
    runs = []
    taken = 0
    for round_ in range(count):
        order = causes[round_ % len(causes) :] + causes[: round_ % len(causes)]
        for cause in order:
            arm = arms[taken % len(arms)]
            taken += 1
            run = run_one(cause, results, iters, slurm, arm)
            runs.append(run)
            steady = "unsteady" if run["steadiness"] == "unsteady" else ""
            print(
                f"round {round_ + 1} {cause:<14} {run['arm']:<11} load {run['load_1min']:5.2f}  "
                f"{run['verdict']:<12} {', '.join(run['named']) or '-'} {steady} ({run['run_id']})",
                flush=True,
            )
    return runs


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="each round runs every cause once (0: the verdict only)")
    p.add_argument("--causes", default=",".join(CAUSES), help="comma list of " + ", ".join(CAUSES))
    p.add_argument("--iters", type=int, default=None, help="timed iterations per run (default: the settings')")
    p.add_argument(
        "--settings",
        default="battery",
        choices=SETTINGS,
        help="the local runs' workload: the battery's own, make bench's, or the README's first sweep's",
    )
    p.add_argument(
        "--verdict-repetitions",
        type=int,
        default=3,
        help="repetitions per fabric of the flipped-verdict demonstration (needs root; 0 leaves it out)",
    )
    p.add_argument("--results", type=Path, default=None, help="where the runs' results go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write every run and the figures here")
    args = p.parse_args()
    # a SIGTERM (a killed battery, a test's timeout) unwinds like Ctrl-C: the planted processes'
    # `finally` blocks end them instead of leaving a busy loop or a disk writer behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    causes = [c for c in args.causes.split(",") if c] if args.rounds else []
    unknown = [c for c in causes if c not in CAUSES]
    iters = args.iters if args.iters is not None else 8
    if unknown or args.rounds < 0 or iters < 1 or not 0 <= args.verdict_repetitions <= 20:
        print(
            f"error: causes must be among {', '.join(CAUSES)} (got {', '.join(unknown) or '-'}); "
            f"--rounds >= 0; --iters >= 1; --verdict-repetitions 0-20",
            file=sys.stderr,
        )
        return 2
    if not causes and not args.verdict_repetitions:
        print("error: nothing to run: --rounds 0 and --verdict-repetitions 0", file=sys.stderr)
        return 2
    emulated = ("traffic" in causes) or args.verdict_repetitions > 0
    if emulated and (os.geteuid() != 0 or shutil.which("iperf3") is None or shutil.which("ip") is None):
        print(
            "error: the traffic cause and the verdict demonstration run emulated clusters: they need root, ip "
            "and iperf3 (make setup-test installs iperf3); --causes without traffic and --verdict-repetitions 0 "
            "run without",
            file=sys.stderr,
        )
        return 2
    if "rate-limited" in causes and (os.geteuid() != 0 or not slurm_nodes.available()):
        print(
            "error: the rate-limited cause runs an emulated Slurm cluster: it needs root and slurm-wlm "
            "(make setup-test installs it); --causes without rate-limited runs without",
            file=sys.stderr,
        )
        return 2
    if "traffic" in causes:
        causes.append("quiet-emulated")  # the traffic cause's quiet control, on the same launcher
    if "rate-limited" in causes:
        causes.append("quiet-slurm")  # the rate-limited cause's quiet control, on the same cluster
    results = args.results or Path(tempfile.mkdtemp(prefix="fabric-bench-battery-"))
    started = uptime()
    print(
        f"battery: {args.rounds} round(s) of {', '.join(causes) or '-'} at the {args.settings} settings; "
        f"results under {results}\n{started}",
        flush=True,
    )
    runs = []
    demo = None
    try:
        with contextlib.ExitStack() as stack:
            slurm = None
            if "rate-limited" in causes:
                slurm = stack.enter_context(slurm_cluster(f"bat{os.getpid() % 10000}", SLURM_RATE, results))
            arms = local_arms(args.settings, args.iters)
            runs += rounds(causes, args.rounds, results, iters, slurm, arms)
        if args.verdict_repetitions:
            demo = demonstrate(
                dict(workload(iters)), results, args.verdict_repetitions, lambda line: print(line, flush=True)
            )
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures = confusion(runs) if runs else None
    if figures:
        print_figures(runs, figures, started, uptime())
    if demo:
        print_demonstration(demo)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "figures": figures, "verdict": demo}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
