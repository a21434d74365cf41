"""Planted disturbances: each a context manager that does one thing to a run while it goes
on, and names the processes it started (`pids`) so a test can check none is left.

    cpu_hogs            one busy process pinned to each core this process may use
    memory_pressure     a writer/reader in a 48 MiB memory cgroup (v1): reclaim, PSI stalls
    stopped_rank        the last rank SIGSTOPped for STOP_S once its timed phase is under way
    background_traffic  iperf3 between the two nodes of an emulated cluster
    disk_writes         `dd oflag=direct` over one scratch file, again and again (I/O pressure)
    loopback_traffic    a TCP pair on 127.0.0.1 pushing bytes as fast as it can (a one-node
                        run's ranks exchange through the loopback)
    rate_limited_node   one node's egress of an emulated Slurm cluster shaped to a quarter
                        of its link (as `emulate up --slow nI` does), its link given back after
    slurm_cluster       the emulated Slurm cluster those runs go to, and its site

Used by the battery (benchmarks/disturbance.py) and its verdict demonstration
(benchmarks/disturbance_verdict.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from launch.errors import UsageError

if TYPE_CHECKING:  # the emulated cluster is imported by the plants that use it
    from launch.fleet.emulate.cluster import Cluster
    from launch.site.config import Site

STOP_S = 1.0
MEMORY_LIMIT_BYTES = 48 << 20
MEMORY_FILE_MB = 200
DISK_FILE_MB = 64  # dd rewrites this much, so nothing fills the disk
PUSHER_NAME = "fb-battery-lo"  # its comm
PUSHER = (
    f"import socket, threading\nopen('/proc/self/comm', 'w').write({PUSHER_NAME!r})\n"
    "server = socket.create_server(('127.0.0.1', 0))\nout = socket.create_connection(server.getsockname())\n"
    "into, _ = server.accept()\n"
    "def drain():\n    while into.recv(1 << 20):\n        pass\n"
    "threading.Thread(target=drain, daemon=True).start()\nblock = bytes(1 << 20)\n"
    "while True:\n    out.sendall(block)\n"
)
CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")
HOG_NAME = "fb-battery-hog"  # its comm: the cpu cause is right only where the sampler names it
HOG = (
    f"import os, sys\nopen('/proc/self/comm', 'w').write({HOG_NAME!r})\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"
)


@contextlib.contextmanager
def cpu_hogs(pids: list[int]) -> Iterator[None]:
    """One busy process on each core this process may use (the run's cores: it is not pinned)."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(cpu)]) for cpu in sorted(os.sched_getaffinity(0))]
    pids += [h.pid for h in hogs]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@contextlib.contextmanager
def memory_pressure(pids: list[int]) -> Iterator[None]:
    """A writer/reader in a small memory cgroup (v1): its page cache is reclaimed as it goes."""
    if not (CGROUP_MEMORY / "memory.limit_in_bytes").exists():
        raise UsageError(f"no cgroup v1 memory controller at {CGROUP_MEMORY}: the memory cause cannot be planted")
    group = CGROUP_MEMORY / f"fabric-bench-battery-{os.getpid()}"
    group.mkdir()
    scratch = tempfile.NamedTemporaryFile(prefix="fabric-bench-battery-", delete=False)
    scratch.close()
    loop = (
        f"echo $$ > {group}/cgroup.procs; while true; do dd if=/dev/zero of={scratch.name} bs=1M "
        f"count={MEMORY_FILE_MB} 2>/dev/null; cat {scratch.name} > /dev/null; done"
    )
    try:
        (group / "memory.limit_in_bytes").write_text(str(MEMORY_LIMIT_BYTES))
        writer = subprocess.Popen(["sh", "-c", loop], start_new_session=True)
        pids.append(writer.pid)
        try:
            yield
        finally:
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait()
    finally:
        for _ in range(50):  # the cgroup empties once the killed processes are reaped
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        os.unlink(scratch.name)


@contextlib.contextmanager
def disk_writes(pids: list[int], where: Path) -> Iterator[None]:
    """`dd if=/dev/zero bs=1M oflag=direct` over one DISK_FILE_MB file under `where` (a real disk:
    O_DIRECT needs one), again and again, in its own session."""
    scratch = tempfile.NamedTemporaryFile(prefix="fabric-bench-battery-dd-", dir=where, delete=False)
    scratch.close()
    loop = (
        f"while true; do dd if=/dev/zero of={scratch.name} bs=1M count={DISK_FILE_MB} oflag=direct "
        "conv=notrunc 2>/dev/null || exit 1; done"
    )
    writer = subprocess.Popen(["sh", "-c", loop], start_new_session=True)
    pids.append(writer.pid)
    try:
        time.sleep(0.5)
        if writer.poll() is not None:
            raise UsageError(f"dd oflag=direct cannot write under {where} (a file system without O_DIRECT?)")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
        os.unlink(scratch.name)


@contextlib.contextmanager
def loopback_traffic(pids: list[int]) -> Iterator[None]:
    """A TCP pair on 127.0.0.1 in one process, pushing 1 MiB writes as fast as it can."""
    pusher = subprocess.Popen([sys.executable, "-c", PUSHER])
    pids.append(pusher.pid)
    try:
        yield
    finally:
        pusher.kill()
        pusher.wait()


def heartbeats(record_dir: Path) -> list[dict]:
    beats = []
    for path in record_dir.glob("heartbeat-*.json"):
        try:
            beats.append(json.loads(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return beats


@contextlib.contextmanager
def stopped_rank(record_dir: Path, warmup: int, done: dict) -> Iterator[None]:
    """SIGSTOP the last rank for STOP_S once its timed phase is under way, then SIGCONT."""
    stop = threading.Event()

    def plant() -> None:
        while not stop.wait(0.05):
            beats = [
                b
                for b in heartbeats(record_dir)
                if b.get("phase") == "train" and b.get("batches_started", 0) >= warmup + 3
            ]
            if beats:
                target = max(beats, key=lambda b: b["rank"])["pid"]
                os.kill(target, signal.SIGSTOP)
                time.sleep(STOP_S)
                os.kill(target, signal.SIGCONT)
                done["pid"] = target
                return

    with beside_the_run(plant, stop):
        yield


@contextlib.contextmanager
def beside_the_run(plant: Callable[[], None], stop: threading.Event) -> Iterator[None]:
    """`plant` in a thread while the run goes on; told to stop (and waited for) when it ends."""
    thread = threading.Thread(target=plant, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def background_traffic(cluster: Cluster | None, pids: list[int], done: dict) -> Iterator[None]:
    """iperf3 from node 0 to node 1 of the run's emulated cluster while it runs (a run without one: refused)."""
    if cluster is None:
        raise UsageError("background traffic goes between the nodes of an emulated cluster: this run has none")
    stop = threading.Event()
    procs: list[subprocess.Popen] = []

    def plant() -> None:
        node0, node1 = cluster.node(0), cluster.node(1)
        while not stop.wait(0.2):  # the cluster comes up inside execute_run
            names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            if node0 in names and node1 in names:
                break
        else:
            return
        time.sleep(1.0)
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", node1, "iperf3", "-s", "-B", cluster.address(1)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        time.sleep(0.5)
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", node0, "iperf3", "-c", cluster.address(1), "-t", "600"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        pids.extend(p.pid for p in procs)
        done["started"] = True

    try:
        with beside_the_run(plant, stop):
            yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextlib.contextmanager
def rate_limited_node(cluster: Cluster, node: int = 1) -> Iterator[None]:
    """Node `node`'s egress shaped to a quarter of its link for the run (the shaper `emulate up
    --slow nI` puts there: launch.fleet.emulate.faults), then shaped back to the link's rate."""
    import dataclasses

    from launch.fleet.emulate import cluster as clusters
    from launch.fleet.emulate.faults import Faults

    slow = dataclasses.replace(cluster, faults=Faults(slow_nodes=((node, None),)))
    clusters.shape(slow, node)
    try:
        yield
    finally:
        clusters.shape(cluster, node)


@contextlib.contextmanager
def slurm_cluster(name: str, rate: str, work: Path) -> Iterator[tuple[Cluster, Site]]:
    """An emulated 2-node Slurm cluster (`fabric-bench emulate up --slurm`) and its site (`site
    init --emulated`); Slurm's clients reach it through SLURM_CONF, set here for the runs.
    Yields (cluster, site); brought down after, also on failure."""
    from launch.fleet import emulate
    from launch.fleet.emulate import slurm_nodes
    from launch.site.config import load_site

    fb = [str(Path(sys.executable).parent / "fabric-bench")]
    up = subprocess.run(
        [*fb, "emulate", "up", "--nodes", "2", "--link", rate, "--slurm", "--name", name],
        capture_output=True,
        text=True,
    )
    if up.returncode != 0:
        raise UsageError(f"emulate up --slurm failed: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
    before = os.environ.get("SLURM_CONF")
    try:
        os.environ["SLURM_CONF"] = str(slurm_nodes.conf_path(name))
        work.mkdir(parents=True, exist_ok=True)
        site_path = work / f"{name}.site.toml"
        init = subprocess.run(
            [*fb, "site", "init", "--emulated", name, "-o", str(site_path)], capture_output=True, text=True
        )
        if init.returncode != 0:
            raise UsageError(f"site init --emulated failed: {(init.stderr.strip().splitlines() or ['?'])[-1]}")
        found = emulate.cluster_named(name)
        assert found is not None, name
        yield found, load_site(site_path)
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        subprocess.run([*fb, "emulate", "down", name], capture_output=True, text=True)
