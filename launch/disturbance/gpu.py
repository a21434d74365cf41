"""The GPUs' side of a disturbance record: `nvidia-smi -q -d PERFORMANCE,CLOCK,PIDS` read by
the sampler's thread every GPU_INTERVAL_S while a run that asked for GPUs goes on.

Per GPU it gives the clock-event reasons (R535's "Clocks Event Reasons", older drivers'
"Clocks Throttle Reasons"), the SM clock against its maximum, and the processes on it.
Two signals come of them (tests: the recorded real outputs under tests/data/nvidia_smi):

- slowdown: HW Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown or SW Thermal
  Slowdown active in a snapshot of the timed window. These slow the GPU for reasons outside
  the benchmark (cooling, power delivery, a neighbour's heat), so they disturb the run.
  SW Power Cap is the board's own power limit, which any full-load run meets on any fabric:
  its share of snapshots is reported, not judged. Idle, Applications Clocks Setting, Sync
  Boost and Display Clock Setting are not slowdowns of the run.
- foreign processes: a compute process on one of the run's GPUs that is not one of the run's
  processes. The run's GPUs are those its own processes appear on; where none appears (a pid
  namespace hides them), every GPU of the host.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass, field

GPU_INTERVAL_S = 5.0  # nvidia-smi -q costs tens of ms of CPU: every 10th snapshot, and one at the end
QUERY = ("nvidia-smi", "-q", "-d", "PERFORMANCE,CLOCK,PIDS")
QUERY_TIMEOUT_S = 10
SLOWDOWNS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")
POWER_CAP = "SW Power Cap"
REASON_HEADINGS = ("Clocks Event Reasons", "Clocks Throttle Reasons")


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    kind: str  # C (compute), G (graphics), C+G
    name: str
    used_mib: int | None


@dataclass
class GpuState:
    bus_id: str
    active_reasons: list[str] = field(default_factory=list)
    sm_mhz: int | None = None
    sm_max_mhz: int | None = None
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class GpuReading:
    time_unix: float
    gpus: list[GpuState]
    run_pids: frozenset[int]  # the run's processes when it was read


def _mhz(value: str) -> int | None:
    match = re.match(r"(\d+) MHz", value)
    return int(match.group(1)) if match else None


def parse_query(text: str) -> list[GpuState]:
    """Each GPU block of `nvidia-smi -q` (any -d selection): reasons, SM clocks, processes."""
    gpus: list[GpuState] = []
    section: list[str] = []  # the headings above the current line, by indent level
    process: dict | None = None

    def close_process() -> None:
        nonlocal process
        if process and gpus and "pid" in process:
            used = re.match(r"(\d+) MiB", process.get("Used GPU Memory", ""))
            gpus[-1].processes.append(
                GpuProcess(
                    process["pid"],
                    process.get("Type", "?"),
                    process.get("Name", "?"),
                    int(used.group(1)) if used else None,
                )
            )
        process = None

    for line in text.splitlines():
        if line.startswith("GPU "):
            close_process()
            gpus.append(GpuState(line[4:].strip()))
            section = []
            continue
        if not gpus or not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        section = section[: max(depth - 1, 0)]
        if not sep or not value:  # a heading: the lines below it belong to it
            section.append(key)
            continue
        where = section[0] if section else ""
        gpu = gpus[-1]
        if where in REASON_HEADINGS and value == "Active":
            gpu.active_reasons.append(key)
        elif where == "Clocks" and key == "SM":
            gpu.sm_mhz = _mhz(value)
        elif where == "Max Clocks" and key == "SM":
            gpu.sm_max_mhz = _mhz(value)
        elif where == "Processes":
            if key == "Process ID":
                close_process()
                process = {"pid": int(value)} if value.isdigit() else None
            elif process is not None:
                process[key] = value
    close_process()
    return gpus


def available() -> bool:
    return shutil.which(QUERY[0]) is not None


def read(run_pids: frozenset[int]) -> tuple[GpuReading | None, float]:
    """One reading (None where nvidia-smi failed), and the CPU seconds nvidia-smi took."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(list(QUERY), capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
        reading = GpuReading(time.time(), parse_query(proc.stdout), run_pids) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        reading = None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return reading, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def gpu_signal(readings: list[GpuReading]) -> dict:
    """The gpu signal over the readings inside the timed window."""
    if not readings:
        return {"verdict": "not measured", "why": "no nvidia-smi reading inside the timed window"}
    run_pids = frozenset().union(*(r.run_pids for r in readings))
    bus_ids = sorted({g.bus_id for r in readings for g in r.gpus})
    mine = {g.bus_id for r in readings for g in r.gpus if any(p.pid in run_pids for p in g.processes)}
    judged = sorted(mine) or bus_ids
    per_gpu = []
    for bus_id in judged:
        states = [g for r in readings for g in r.gpus if g.bus_id == bus_id]
        slowdowns = {reason: sum(reason in g.active_reasons for g in states) for reason in SLOWDOWNS}
        foreign: dict[int, GpuProcess] = {}
        for g in states:
            foreign.update({p.pid: p for p in g.processes if p.pid not in run_pids and "C" in p.kind})
        clocks = [g.sm_mhz for g in states if g.sm_mhz is not None]
        per_gpu.append(
            {
                "bus_id": bus_id,
                "snapshots": len(states),
                "slowdowns": {reason: n for reason, n in slowdowns.items() if n},
                "power_cap_share": round(sum(POWER_CAP in g.active_reasons for g in states) / len(states), 3),
                "sm_mhz_mean": round(sum(clocks) / len(clocks)) if clocks else None,
                "sm_max_mhz": next((g.sm_max_mhz for g in states if g.sm_max_mhz), None),
                "foreign_processes": [{"pid": p.pid, "name": p.name, "used_mib": p.used_mib} for p in foreign.values()],
            }
        )
    disturbed = any(g["slowdowns"] or g["foreign_processes"] for g in per_gpu)
    return {
        "gpus": per_gpu,
        "judged": "the run's GPUs" if mine else "every GPU of the host",
        "verdict": "disturbed" if disturbed else "clean",
    }


def gpu_words(figures: dict) -> str:
    parts = []
    for g in figures.get("gpus", []):
        for reason, n in g["slowdowns"].items():
            parts.append(f"GPU {g['bus_id']}: {reason} active in {n} of {g['snapshots']} readings")
        if g["foreign_processes"]:
            who = ", ".join(
                f"pid {p['pid']} ({p['name']}" + (f", {p['used_mib']} MiB)" if p["used_mib"] is not None else ")")
                for p in g["foreign_processes"]
            )
            parts.append(f"GPU {g['bus_id']}: another process was on it during the timed window: {who}")
    return "; ".join(parts)
