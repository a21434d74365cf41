"""The GPU check's captures (benchmarks/gpu_check.py): nvidia-smi's outputs, parsed by
launch.site.probe where it can, and the GPU's state idle, beside one load process and beside two."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.gpu_check_process import REPO, Log
from launch.sessions import end_session
from launch.site import probe  # standard library only

QUERY_FIELDS = (
    "index",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "clocks.max.sm",
    "clocks.max.memory",
    "power.limit",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)
CAPTURES = {  # file name -> argv
    "nvidia_smi.txt": probe.COMMANDS["nvidia_smi"],  # the probe's own query, parsed by parse_nvidia_smi
    "nvidia_smi_query.csv": ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv"],
    "nvidia_smi_topo.txt": probe.COMMANDS["nvidia_smi_topo"],
    "nvidia_smi_q.txt": ["nvidia-smi", "-q"],
}


def capture(mode: str, out: Path, log: Log, limit_s: float = 60) -> dict:
    """nvidia-smi outputs under captures/, each with its status; parsed where the probe can. Each
    capture has its share of `limit_s`, the step's time limit."""
    folder = out / "captures"
    folder.mkdir(parents=True, exist_ok=True)
    have = shutil.which("nvidia-smi")
    captures: dict[str, dict] = {}
    for name, argv in CAPTURES.items():
        if mode == "cpu" or not have:
            reason = ("--cpu: the check runs without a GPU" if mode == "cpu" else "") + (
                "" if have else ("; " if mode == "cpu" else "") + "nvidia-smi not on PATH"
            )
            captures[name] = {"status": "absent", "reason": reason, "argv": argv}
            (folder / f"{name}.absent").write_text(reason + "\n", encoding="utf-8")
            continue
        result = probe.run_tool(name, argv, timeout_s=max(1.0, limit_s / len(CAPTURES)))
        (folder / name).write_text(result.stdout, encoding="utf-8")
        captures[name] = {
            "status": "ok" if result.status == "ok" else "failed",
            "reason": None if result.status == "ok" else result.status,
            "argv": argv,
            "file": f"captures/{name}",
        }
    for name, entry in captures.items():
        log(f"capture {name}: {entry['status']}" + (f" ({entry['reason']})" if entry["reason"] else ""))
    parsed: dict = {}
    if captures["nvidia_smi.txt"]["status"] == "ok":
        parsed["gpus"] = [
            dataclasses.asdict(g) for g in probe.parse_nvidia_smi((folder / "nvidia_smi.txt").read_text())
        ]
    if captures["nvidia_smi_topo.txt"]["status"] == "ok":
        topology = probe.parse_nvidia_smi_topo((folder / "nvidia_smi_topo.txt").read_text())
        if topology:
            parsed["gpu_topology"] = dataclasses.asdict(topology)
            parsed["nearest_nics"] = {f"GPU{g.index}": topology.nearest_nics(g.index) for g in topology.gpus}
    return {"captures": captures, "parsed": parsed}


# The GPU's state as a disturbance record reads it (issue 37): clocks, clock-event reasons and the
# compute processes, taken idle, beside one process's load and beside two; the event reasons under
# both names (clocks_throttle_reasons was renamed clocks_event_reasons in R535; an unknown field
# fails the whole query, so each name is its own capture)
GPU_STATE_FIELDS = (
    "index",
    "uuid",
    "pstate",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "utilization.gpu",
    "memory.used",
)
EVENT_REASONS = (
    "active",
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)
GPU_STATE_CAPTURES = {
    "query_gpu_events.csv": [
        "nvidia-smi",
        "--query-gpu=" + ",".join(GPU_STATE_FIELDS + tuple(f"clocks_event_reasons.{r}" for r in EVENT_REASONS)),
        "--format=csv",
    ],
    "query_gpu_throttle.csv": [
        "nvidia-smi",
        "--query-gpu=" + ",".join(GPU_STATE_FIELDS + tuple(f"clocks_throttle_reasons.{r}" for r in EVENT_REASONS)),
        "--format=csv",
    ],
    "query_compute_apps.csv": [
        "nvidia-smi",
        "--query-compute-apps=pid,process_name,gpu_uuid,used_memory",
        "--format=csv",
    ],
    "q_performance.txt": ["nvidia-smi", "-q", "-d", "PERFORMANCE,CLOCK"],
}
LOAD_SECONDS = 25


def start_load(env: dict, log: Log, wait_s: float = 60) -> tuple[subprocess.Popen, int | None]:
    """A process multiplying bf16 matrices on the GPU, and its pid once its first product is done
    (waited for at most `wait_s`)."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "gpu_probes.py"), "load", str(LOAD_SECONDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    ready: list[int] = []
    output = proc.stdout
    assert output is not None  # stdout=PIPE

    def wait_ready() -> None:
        for line in output:
            if line.startswith("GPU_PROBE "):
                ready.append(json.loads(line.split(" ", 1)[1])["pid"])
                return

    waiter = threading.Thread(target=wait_ready, daemon=True)
    waiter.start()
    waiter.join(max(0.0, wait_s))
    how = (
        "ready"
        if ready
        else ("exited before its first product" if proc.poll() is not None else f"not ready after {wait_s:.0f} s")
    )
    log(f"gpu state: load process {proc.pid} {how}")
    return proc, (ready[0] if ready else None)


def capture_gpu_states(mode: str, info: dict, out: Path, env: dict, log: Log, until: float = float("inf")) -> dict:
    """captures/gpu_states/<state>/<capture> for the states idle, one (one load) and two (two loads);
    a state that cannot be taken before `until` (time.monotonic(): the step's limit) is skipped."""
    folder = out / "captures" / "gpu_states"
    folder.mkdir(parents=True, exist_ok=True)
    if mode == "cpu" or not shutil.which("nvidia-smi") or not info.get("cuda_available"):
        reason = "--cpu" if mode == "cpu" else "nvidia-smi or a CUDA device is absent"
        (folder / "absent.txt").write_text(reason + "\n", encoding="utf-8")
        log(f"gpu state captures: absent ({reason})")
        return {"status": "absent", "reason": reason}
    loads: list[tuple[subprocess.Popen, int | None]] = []
    states: dict[str, dict] = {}
    try:
        for state in ("idle", "one", "two"):
            if until - time.monotonic() < 8:
                states[state] = {"status": "skipped", "reason": "the step's time limit was reached"}
                log(f"gpu state {state}: skipped (the step's time limit)")
                continue
            if state != "idle":
                loads.append(start_load(env, log, until - time.monotonic() - 6))
                time.sleep(3)
            where = folder / state
            where.mkdir(exist_ok=True)
            statuses = {}
            for name, argv in GPU_STATE_CAPTURES.items():
                result = probe.run_tool(name, argv, timeout_s=max(1.0, min(30.0, until - time.monotonic())))
                (where / name).write_text(result.stdout, encoding="utf-8")
                statuses[name] = result.status
            states[state] = {
                "captures": statuses,
                "load_pids": [pid for _, pid in loads],
                "load_popen_pids": [proc.pid for proc, _ in loads],
            }
            log(f"gpu state {state}: " + ", ".join(f"{n} {st}" for n, st in statuses.items()))
    finally:
        for proc, _ in loads:
            end_session(proc)
    (folder / "states.json").write_text(json.dumps(states, indent=2) + "\n", encoding="utf-8")
    return {"status": "ok", "states": states}
