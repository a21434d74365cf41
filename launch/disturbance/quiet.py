"""Is this host quiet? A few seconds of a run's host signals (CPU taken by others, steal, memory
and I/O pressure) sampled before a sweep or a locate, judged by the limits a run's record uses (judge).

    python -m launch.disturbance.quiet [SECONDS]    # one JSON line: this host's report

Under Slurm the same module runs as one task per node (`srun --ntasks-per-node=1`), so every
node is judged on its own /proc; elsewhere only this host is (mpirun's other hosts are named
as not checked by the caller).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from launch.disturbance.judge import CPU, IO, MEMORY, STEAL, cause_words, cpu_signal, io_signal, memory_signal
from launch.disturbance.sample import INTERVAL_S, Sampler

QUIET_SECONDS = 3.0  # six snapshots: a hog of a quarter core shows; a sweep waits no longer than this
REPORT_PREFIX = "FABRIC_BENCH_QUIET "


def sample_here(seconds: float = QUIET_SECONDS) -> dict:
    """This host's report: quiet or busy, with the causes in words and the figures."""
    sampler = Sampler(os.getpid(), interval=INTERVAL_S).start()  # a fixed 0.5 s: six looks, the cost of six
    time.sleep(seconds)
    snapshots = sampler.stop().snapshots
    span = snapshots[-1].time_unix - snapshots[0].time_unix if len(snapshots) > 1 else 0.0
    if span <= 0:
        return {"host": socket.gethostname(), "verdict": "not checked", "why": "fewer than two snapshots"}
    cpu, steal = cpu_signal(snapshots, span)
    signals = {CPU: cpu, STEAL: steal, MEMORY: memory_signal(snapshots, span), IO: io_signal(snapshots, span)}
    window = "the quiet check"
    causes = [
        cause_words(name, figures, span, window)
        for name, figures in signals.items()
        if figures.get("verdict") == "disturbed"
    ]
    return {
        "host": socket.gethostname(),
        "verdict": "busy" if causes else "quiet",
        "seconds": round(span, 2),
        "causes": causes,
        "signals": signals,
    }


def parse_reports(text: str) -> list[dict]:
    """The reports in a command's output (one line each, behind REPORT_PREFIX); others ignored."""
    reports = []
    for line in text.splitlines():
        if line.startswith(REPORT_PREFIX):
            try:
                report = json.loads(line[len(REPORT_PREFIX) :])
            except ValueError:
                continue
            if isinstance(report, dict) and isinstance(report.get("host"), str):
                reports.append(report)
    return reports


def check_nodes(srun_prefix: list[str], seconds: float = QUIET_SECONDS, timeout: float = 120) -> list[dict]:
    """Every node of an srun step (srun_prefix: `srun ... --ntasks-per-node=1`), or one report saying
    why the nodes could not be checked."""
    argv = [*srun_prefix, sys.executable, "-m", "launch.disturbance.quiet", str(seconds)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [{"host": "(slurm nodes)", "verdict": "not checked", "why": f"{argv[0]}: {exc}"}]
    reports = parse_reports(proc.stdout)
    if proc.returncode != 0 or not reports:
        last = (proc.stderr.strip().splitlines() or ["no report"])[-1]
        return [{"host": "(slurm nodes)", "verdict": "not checked", "why": f"exit {proc.returncode}: {last}"}]
    return sorted(reports, key=lambda r: r["host"])


def busy_lines(reports: list[dict]) -> list[str]:
    """One line per busy node, naming it and what kept it busy."""
    return [f"{r['host']} is busy: {'; '.join(r['causes'])}" for r in reports if r.get("verdict") == "busy"]


def main(argv: list[str]) -> int:
    try:
        seconds = float(argv[0]) if argv else QUIET_SECONDS
    except ValueError:
        print("usage: python -m launch.disturbance.quiet [SECONDS]", file=sys.stderr)
        return 2
    print(REPORT_PREFIX + json.dumps(sample_here(seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
