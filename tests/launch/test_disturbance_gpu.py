"""The GPUs' side of a disturbance record (launch.disturbance.gpu), read from a recorded real
`nvidia-smi -q` (tests/data/nvidia_smi/driver-535-rtx4090-q-process, see its SOURCE.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from launch.disturbance import gpu
from launch.disturbance.gpu import GpuReading, GpuState, gpu_signal, gpu_words, parse_query
from launch.disturbance.judge import GPU, record
from launch.disturbance.sample import Sampler

CAPTURE = Path(__file__).parents[1] / "data" / "nvidia_smi" / "driver-535-rtx4090-q-process" / "nvidia_smi_q.txt"
PID = 2180559  # the python process the capture shows on GPU 00000000:01:00.0


def test_the_reasons_clocks_and_processes_are_read_from_a_real_capture():
    (state,) = parse_query(CAPTURE.read_text())
    assert state.bus_id == "00000000:01:00.0"
    assert state.active_reasons == ["Idle"]  # every other reason reads "Not Active"
    assert (state.sm_mhz, state.sm_max_mhz) == (210, 3105)
    assert [(p.pid, p.kind, p.name, p.used_mib) for p in state.processes] == [
        (PID, "C", "/opt/conda/bin/python", 22072)
    ]


def test_a_process_outside_the_run_on_its_gpu_disturbs_it_and_is_named():
    text = CAPTURE.read_text()
    foreign = gpu_signal([GpuReading(1.0, parse_query(text), frozenset({4242}))])
    assert foreign["verdict"] == "disturbed" and foreign["judged"] == "every GPU of the host"
    assert gpu_words(foreign) == (
        "GPU 00000000:01:00.0: another process was on it during the timed window: "
        f"pid {PID} (/opt/conda/bin/python, 22072 MiB)"
    )
    # the same process counted as the run's own: its GPU is the run's, and nothing foreign is on it
    own = gpu_signal([GpuReading(1.0, parse_query(text), frozenset({PID}))])
    assert own["verdict"] == "clean" and own["judged"] == "the run's GPUs"
    assert own["gpus"][0]["power_cap_share"] == 0.0 and own["gpus"][0]["sm_mhz_mean"] == 210


def test_a_slowdown_disturbs_and_the_power_cap_is_only_reported():
    """Which reasons count: the reason names as the capture spells them."""
    reasons = {r for r in gpu.SLOWDOWNS} | {gpu.POWER_CAP}
    capture_reasons = {
        line.split(":")[0].strip() for line in CAPTURE.read_text().splitlines() if line.strip().endswith("Active")
    }
    assert reasons <= capture_reasons  # no reason name here that nvidia-smi does not print
    capped = GpuState("00000000:01:00.0", active_reasons=[gpu.POWER_CAP], sm_mhz=2400, sm_max_mhz=3105)
    assert gpu_signal([GpuReading(1.0, [capped], frozenset())])["verdict"] == "clean"
    hot = GpuState("00000000:01:00.0", active_reasons=["HW Slowdown", "HW Thermal Slowdown"], sm_mhz=900)
    figures = gpu_signal([GpuReading(1.0, [capped], frozenset()), GpuReading(2.0, [hot], frozenset())])
    assert figures["verdict"] == "disturbed" and figures["gpus"][0]["power_cap_share"] == 0.5
    assert "HW Thermal Slowdown active in 1 of 2 readings" in gpu_words(figures)


def test_the_sampler_reads_nvidia_smi_only_for_gpu_runs_and_the_record_judges_it(tmp_path, monkeypatch):
    """A real Sampler on this host with nvidia-smi on PATH printing the recorded capture."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat '{CAPTURE}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    assert gpu.available()
    without = Sampler(os.getpid(), interval=0.05)
    without.take(), without.take(last=True)
    assert without.gpu_readings == [] and "gpu_readings" not in without.cost()
    sampler = Sampler(os.getpid(), interval=0.05, gpus=True)
    first = sampler.take()
    sampler.take()  # within GPU_INTERVAL_S: no second reading
    last = sampler.take(last=True)  # the end of the run: always read
    assert len(sampler.gpu_readings) == 2 and sampler.cost()["gpu_readings"] == 2
    records = [
        {"kind": "progress", "rank": 0, "step_end_unix": first.time_unix},
        {"kind": "progress", "rank": 0, "step_end_unix": last.time_unix},
    ]
    disturbance = record(sampler.snapshots, records, {"hosts": []}, 0.05, sampler.cost(), None, sampler.gpu_readings)
    assert disturbance["signals"][GPU]["verdict"] == "disturbed"
    assert any(c["signal"] == GPU and f"pid {PID}" in c["words"] for c in disturbance["causes"])
