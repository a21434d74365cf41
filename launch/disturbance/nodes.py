"""Per-node sampling under Slurm: every node of a run's job sampled on its own /proc.

A Slurm run's ranks sit on nodes fabric-bench does not run on, so the sampler in
fabric-bench's own process (launch.disturbance.sample) sees none of them. Once the ranks'
step is running, fabric-bench attaches one more step to their job:

    srun --jobid=JOB --overlap --nodes=N --ntasks=N --ntasks-per-node=1 \\
         PYTHON -m launch.disturbance.nodes RECORD_DIR [INTERFACE] [--gpus]

one task per node (one process per node, none per rank), each running the same Sampler as a
local run (its own /proc, the ranks named by their heartbeats, the fabric interface read in
the node's own network namespace, nvidia-smi where the run asked for GPUs) and reading the
node's link shaper twice (launch.disturbance.link). It stops on the stop file fabric-bench
writes as the run ends, or on SIGTERM (Slurm ends a job's steps with it), and writes
RECORD_DIR/node-HOST.json: its snapshots, readings and own cost. fabric-bench judges each
node's file like its own snapshots (launch.disturbance.judge.nodes_record).

The job is found by its ranks' step name (`srun --job-name`, launch.ranks.launchers.ranks_step_name)
in `squeue --steps`, so the same holds for srun inside an allocation, srun making its own
job, and a batch job's srun. Like the quiet check, the nodes run fabric-bench's own Python
(a shared file system, as the record directory is).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from launch.disturbance import gpu, link
from launch.disturbance.sample import INTERVAL_S, Sampler, Snapshot
from launch.sessions import end_session

STOP_FILE = "nodes-stop"
FILE_PREFIX = "node-"
FIND_EVERY_S = 1.0  # squeue is asked this often until the ranks' step shows
STOP_WAIT_S = 20.0  # the nodes' last snapshot and file, after the stop file
MAX_NODE_FILE_BYTES = 64 << 20


# -- on each node ------------------------------------------------------------------------------


def snapshot_json(s: Snapshot) -> dict:
    return {
        **dataclasses.asdict(s),
        "cpu_busy": [[cpu, ticks] for cpu, ticks in s.cpu_busy.items()],
        "foreign": [[pid, start, name, ticks] for (pid, start), (name, ticks) in s.foreign.items()],
        "own": [[pid, start, ticks] for (pid, start), ticks in s.own.items()],
        "io": [[pid, start, name, nbytes] for (pid, start), (name, nbytes) in s.io.items()],
    }


def snapshot_from(data: dict) -> Snapshot:
    """A Snapshot from a node file (ValueError, TypeError or KeyError where it is not one)."""
    return Snapshot(
        float(data["time_unix"]),
        {int(cpu): int(ticks) for cpu, ticks in data["cpu_busy"]},
        int(data["steal"]),
        int(data["own_ticks"]),
        int(data["self_ticks"]),
        {(int(pid), int(start)): (str(name), int(ticks)) for pid, start, name, ticks in data["foreign"]},
        {(int(pid), int(start)): int(ticks) for pid, start, ticks in data["own"]},
        [(int(pid), str(name)) for pid, name in data["stopped"]],
        None if data["memory_some_us"] is None else int(data["memory_some_us"]),
        None if data["memory_full_us"] is None else int(data["memory_full_us"]),
        None if data["swapped_pages"] is None else int(data["swapped_pages"]),
        {str(name): (int(rx), int(tx)) for name, (rx, tx) in data.get("net", {}).items()},
        [int(c) for c in data.get("run_cpus", [])],
        None if data.get("io_some_us") is None else int(data["io_some_us"]),
        None if data.get("io_full_us") is None else int(data["io_full_us"]),
        {(int(pid), int(start)): (str(name), int(nbytes)) for pid, start, name, nbytes in data.get("io", [])},
        None if data.get("loopback") is None else (int(data["loopback"][0]), int(data["loopback"][1])),
        None if data.get("cgroup") is None else str(data["cgroup"]),
        None if data.get("cgroup_usec") is None else int(data["cgroup_usec"]),
        bool(data.get("cgroup_has_self", False)),
    )


def gpu_reading_from(data: dict) -> gpu.GpuReading:
    states = [
        gpu.GpuState(
            str(g["bus_id"]),
            [str(r) for r in g["active_reasons"]],
            g["sm_mhz"],
            g["sm_max_mhz"],
            [gpu.GpuProcess(int(p["pid"]), str(p["kind"]), str(p["name"]), p["used_mib"]) for p in g["processes"]],
        )
        for g in data["gpus"]
    ]
    return gpu.GpuReading(float(data["time_unix"]), states, frozenset(int(p) for p in data["run_pids"]))


def sample_node(record_dir: Path, interface: str | None, gpus: bool, stop: threading.Event) -> dict:
    """This node's sampling until `stop` is set or the stop file shows: what its file holds."""
    sampler = Sampler(os.getpid(), record_dir, (interface,) if interface else (), gpus=gpus and gpu.available()).start()
    links = [link.read_link(interface)] if interface else []
    while not stop.wait(INTERVAL_S) and not (record_dir / STOP_FILE).exists():
        pass
    sampler.stop()
    if interface:
        links.append(link.read_link(interface))
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "interval_s": sampler.interval,
        "interface": interface,
        "cost": sampler.cost(),
        "snapshots": [snapshot_json(s) for s in sampler.snapshots],
        "gpus": sampler.gpus,
        "gpu_readings": [{**dataclasses.asdict(r), "run_pids": sorted(r.run_pids)} for r in sampler.gpu_readings],
        "link": links,
        # the node's GPU driver, as its kernel module names itself: preflight's driver floor is
        # judged on the nodes that ran the ranks, not on the host that launched them
        # (launch.site.preflight.driver.on_nodes)
        "driver_version_file": driver_version_file() if gpus else None,
    }


def driver_version_file(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The first line of the NVIDIA kernel module's version file; None where there is none."""
    try:
        return path.read_text(errors="replace").splitlines()[0][:300]
    except (OSError, IndexError):
        return None


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--gpus"]
    if not 1 <= len(args) <= 2:
        print("usage: python -m launch.disturbance.nodes RECORD_DIR [INTERFACE] [--gpus]", file=sys.stderr)
        return 2
    record_dir = Path(args[0])
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    found = sample_node(record_dir, args[1] if len(args) > 1 else None, "--gpus" in argv, stop)
    path = record_dir / f"{FILE_PREFIX}{found['host']}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(found))
    partial.replace(path)
    return 0


# -- on the host that launched the run -----------------------------------------------------------


def job_of_step(name: str) -> str | None:
    """The job whose running step is named `name` (squeue --steps), None while there is none."""
    try:
        proc = subprocess.run(
            ["squeue", "--steps", "--noheader", "--format=%i|%j"], capture_output=True, text=True, timeout=15
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in proc.stdout.splitlines():
        step, _, step_name_seen = line.strip().partition("|")
        if step_name_seen == name and "." in step:
            return step.split(".", 1)[0]
    return None


class NodeSamplers:
    """The per-node sampler step of one Slurm run, started once its ranks' step shows and stopped
    (stop file, then SIGTERM, then SIGKILL to its srun's session) as the run ends."""

    def __init__(self, record_dir: Path, step: str, nodes: int, interface: str | None, gpus: bool):
        self.record_dir, self.step, self.nodes = record_dir, step, nodes
        self.interface, self.gpus = interface, gpus
        self.job_id: str | None = None
        self.why_not: str | None = None
        self._proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._attach, name="node-samplers", daemon=True)

    def argv(self, job_id: str) -> list[str]:
        return [
            "srun",
            f"--jobid={job_id}",
            "--overlap",
            f"--nodes={self.nodes}",
            f"--ntasks={self.nodes}",
            "--ntasks-per-node=1",
            "--mpi=none",
            "--kill-on-bad-exit=0",
            f"--job-name={self.step}-nodes",
            sys.executable,
            "-m",
            "launch.disturbance.nodes",
            str(self.record_dir),
            *([self.interface] if self.interface else []),
            *(["--gpus"] if self.gpus else []),
        ]

    def start(self) -> "NodeSamplers":
        self._thread.start()
        return self

    def _attach(self) -> None:
        while not self._stop.wait(FIND_EVERY_S):
            if (job := job_of_step(self.step)) is None:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                self.job_id = job
                log = open(self.record_dir.parent / "node-samplers.log", "w")
                try:
                    self._proc = subprocess.Popen(
                        self.argv(job), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                except OSError as exc:
                    self.why_not = f"srun: {exc}"
                finally:
                    log.close()
            return
        self.why_not = self.why_not or f"the ranks' step {self.step} was never seen running (squeue --steps)"

    def stop(self) -> "NodeSamplers":
        with self._lock:
            self._stop.set()
        self._thread.join()
        if self._proc is None:
            return self
        (self.record_dir / STOP_FILE).touch()
        try:
            self._proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            end_session(self._proc, term_grace_s=5.0)
        return self

    def files(self) -> dict[str, dict]:
        """host -> what its node file holds, or {"error": why} for a file that cannot be read."""
        found: dict[str, dict] = {}
        for path in sorted(self.record_dir.glob(f"{FILE_PREFIX}*.json")):
            host = path.name[len(FILE_PREFIX) : -len(".json")]
            try:
                if path.stat().st_size > MAX_NODE_FILE_BYTES:
                    raise ValueError(f"over {MAX_NODE_FILE_BYTES >> 20} MiB")
                data = json.loads(path.read_text())
                if not isinstance(data, dict) or not isinstance(data.get("snapshots"), list):
                    raise ValueError("not a node sampler's file")
                found[host] = data
            except (OSError, ValueError) as exc:
                found[host] = {"error": f"{path.name}: {exc}"}
        return found


class RunSampler:
    """A run's sampling: this host's sampler and, under Slurm, the nodes' (the object
    launch.ranks.execute starts and stops)."""

    def __init__(self, here: Sampler, nodes: NodeSamplers | None = None):
        self.here, self.nodes = here, nodes

    def start(self) -> "RunSampler":
        self.here.start()
        if self.nodes is not None:
            self.nodes.start()
        return self

    def stop(self) -> "RunSampler":
        if self.nodes is not None:
            self.nodes.stop()
        self.here.stop()
        return self


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
