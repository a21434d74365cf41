"""Short runs judged on their own (issue 68): are a short run's own ranks ever booked as others?

Twenty 2-rank 1 MiB allreduce runs (1-3 s each, through the command an operator types:
`fabric-bench run --benchmark allreduce --backend mpi --launcher mpirun --runtime host --ranks 2
--min-bytes 1048576 --max-bytes 1048576`), then twenty more beside a planted CPU hog (one busy
process per core, benchmarks/planting.cpu_hogs). Each run's disturbance record is read back
from its result.json. It prints every run as it ends (the 1-minute load before it, the verdict,
others' and the run's cores, where the run's CPU was counted from, the looks inside the window),
then

    quiet runs read disturbed        target <= 1 of 20
    planted runs naming the hog      target >= 19 of 20 (the cpu cause, the hog among the busiest)
    runs too short to judge          neither clean nor disturbed: counted apart

with `uptime` at the start and at the end. On a machine shared with other work, others' CPU
is a real disturbance the script did not plant: a quiet run flagged names who it was, so a
figure taken beside other load can be told from the run's own ranks booked as others.
Every rank's and every hog's pid is checked gone at the end.

    python benchmarks/short_runs.py
    python benchmarks/short_runs.py --runs 5 --results /tmp/short --json short.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.planting import HOG_NAME, cpu_hogs  # noqa: E402
from launch.results.result import fields_of, read  # noqa: E402
from launch.schema import Disturbance  # noqa: E402

FABRIC_BENCH = str(Path(sys.executable).parent / "fabric-bench")
ALLREDUCE = [
    *("run", "--benchmark", "allreduce", "--backend", "mpi", "--launcher", "mpirun", "--runtime", "host"),
    *("--ranks", "2", "--min-bytes", "1048576", "--max-bytes", "1048576"),
]
RUN_TIMEOUT_S = 300
QUIET_TARGET, NAMED_TARGET = 1, 19  # of 20: at most one quiet run disturbed, the hog named in 19


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def rank_pids(run_dir: Path) -> set[int]:
    pids = set()
    for path in (run_dir / "ranks").glob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                if isinstance(pid := json.loads(line).get("pid"), int):
                    pids.add(pid)
    return pids


def alive(pids: set[int]) -> set[int]:
    """The pids still running (a zombie has ended)."""
    left = set()
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
                left.add(pid)
    return left


def one_run(results: Path, planted: bool) -> dict:
    """One allreduce run through the CLI, a hog per core beside it where `planted`; its record's figures."""
    hogs: list[int] = []
    load = load_1min()
    plant = cpu_hogs(hogs) if planted else contextlib.nullcontext()
    started = time.monotonic()
    with plant:
        if planted:
            time.sleep(0.3)  # the hogs busy before the run starts
        done = subprocess.run(
            [FABRIC_BENCH, *ALLREDUCE, "--results", str(results)],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    seconds = time.monotonic() - started
    where = next((ln.split(":", 1)[1].strip() for ln in done.stdout.splitlines() if ln.startswith("result:")), None)
    if done.returncode != 0 or where is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        return {"planted": planted, "load_1min": load, "failed": f"exit {done.returncode}: {' / '.join(tail)}"}
    fields = fields_of(read(where))
    record = fields.disturbance or Disturbance()
    cpu = (record.signals or {}).get("cpu") or {}
    window = record.window or {}
    top = [t.get("name") for t in cpu.get("top") or []]
    causes = record.causes or []
    return {
        "planted": planted,
        "run_id": fields.run_id,
        "load_1min": load,
        "seconds": round(seconds, 2),
        "window_seconds": window.get("seconds"),
        "looks_inside": window.get("looks_inside"),
        "verdict": record.verdict,
        "named": sorted({str(c.signal) for c in causes}),
        "words": [str(c.words) for c in causes],
        "hog_named": any(c.signal == "cpu" for c in causes) and HOG_NAME in top,
        "other_cores": cpu.get("other_cores"),
        "run_cores": cpu.get("run_cores"),
        "run_cores_from": cpu.get("run_cores_from"),
        "top": top,
        "pids": sorted(rank_pids(Path(where).parent) | set(hogs)),
    }


def line(n: int, run: dict) -> str:
    label = "hog  " if run["planted"] else "quiet"
    if "failed" in run:
        return f"{label} {n:>2}  load {run['load_1min']:5.2f}  FAILED {run['failed']}"
    return (
        f"{label} {n:>2}  load {run['load_1min']:5.2f}  {run['seconds']:5.2f} s (window {run['window_seconds']} s, "
        f"{run['looks_inside']} looks)  {run['verdict']:<18} others {run['other_cores']} run {run['run_cores']} "
        f"({run['run_cores_from']})  {', '.join(run['top'][:3]) or '-'}"
    )


def summary(runs: list[dict]) -> list[str]:
    quiet = [r for r in runs if not r["planted"] and "failed" not in r]
    hogged = [r for r in runs if r["planted"] and "failed" not in r]
    out = []
    if quiet:
        flagged = [r for r in quiet if r["verdict"] == "disturbed"]
        short = [r for r in quiet if r["verdict"] == "too short to judge"]
        out.append(
            f"quiet runs read disturbed: {len(flagged)} of {len(quiet)} (target <= {QUIET_TARGET} of 20); "
            f"too short to judge: {len(short)}"
        )
        out += [f"  flagged {r['run_id']} (load {r['load_1min']:.2f}): {'; '.join(r['words'])}" for r in flagged]
    if hogged:
        named = [r for r in hogged if r["hog_named"]]
        short = [r for r in hogged if r["verdict"] == "too short to judge"]
        out.append(
            f"planted runs naming the hog: {len(named)} of {len(hogged)} (target >= {NAMED_TARGET} of 20); "
            f"too short to judge: {len(short)}"
        )
        out += [
            f"  missed {r['run_id']}: {r['verdict']} {'; '.join(r['words']) or ''}" for r in hogged if r not in named
        ]
    failed = [r for r in runs if "failed" in r]
    if failed:
        out.append(f"failed runs: {len(failed)}")
    loads = [r["load_1min"] for r in runs]
    out.append(
        f"machine load (1-min average before each run): {min(loads):.2f} - {max(loads):.2f} on {os.cpu_count()} cores"
    )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="quiet runs, and as many beside the hog (default 20)")
    p.add_argument("--results", type=Path, default=None, help="where the runs' results go (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write every run and the summary here")
    args = p.parse_args()
    if not 1 <= args.runs <= 1000:
        print(f"error: --runs must be 1-1000 (got {args.runs})", file=sys.stderr)
        return 2
    if not Path(FABRIC_BENCH).exists():
        print(f"error: {FABRIC_BENCH} not found: run this with the venv's python (.venv/bin/python)", file=sys.stderr)
        return 2
    results = args.results or Path(tempfile.mkdtemp(prefix="fabric-bench-short-"))
    started = uptime()
    print(f"short runs: {args.runs} quiet, then {args.runs} beside a hog per core; results under {results}")
    print(f"uptime at the start: {started}", flush=True)
    runs = []
    for planted in (False, True):
        for n in range(1, args.runs + 1):
            runs.append(one_run(results, planted))
            print(line(n, runs[-1]), flush=True)
    ended = uptime()
    lines = summary(runs)
    print("\n" + "\n".join(lines))
    print(f"uptime at the start: {started}\nuptime at the end:   {ended}")
    left = alive({pid for r in runs for pid in r.get("pids", [])})
    print(f"processes left behind: {sorted(left) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": lines, "uptime": [started, ended]}, indent=2) + "\n")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
