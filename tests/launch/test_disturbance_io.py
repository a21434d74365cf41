"""The misses closed (issue 55): direct disk writes beside a run are named by the I/O signal with the
writing process, and bytes pushed through the loopback beside a one-node run are named as foreign
traffic beyond the run's own; both planted for real (an O_DIRECT writer like `dd oflag=direct`, a
TCP socket pair on 127.0.0.1), each planted process gone after."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from launch.disturbance import judge, nodes, sample
from launch.ranks.command import Command
from launch.ranks.execute import execute
from tests.conftest import alive
from tests.results import train_result

pytestmark = pytest.mark.slow  # each plants real load for a few seconds beside a sampled run

# like `dd if=/dev/zero of=FILE bs=1M oflag=direct`, over one 64 MiB file again and again (no disk filled)
WRITER = """
import mmap, os, sys
open("/proc/self/comm", "w").write("fbtest-io")
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(str(os.getpid()))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
block = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT wants
print(flush=True)
while True:
    for i in range(64):
        os.pwrite(fd, block, i << 20)
"""
# a TCP pair on the loopback pushing 1 MiB writes as fast as it can
PUSHER = """
import socket, threading
open("/proc/self/comm", "w").write("fbtest-lo")
server = socket.create_server(("127.0.0.1", 0))
out = socket.create_connection(server.getsockname())
into, _ = server.accept()
def drain():
    while into.recv(1 << 20):
        pass
threading.Thread(target=drain, daemon=True).start()
block = bytes(1 << 20)
print(flush=True)
while True:
    out.sendall(block)
"""


def planted(code: str, *args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "\n"  # under way
    return proc


def sampled_run(tmp_path, seconds: float) -> sample.Sampler:
    """A sampled run of `seconds` (the run: a sleep), its whole run the window."""
    own = Command(["sleep", str(seconds)])
    outcome = execute(own, tmp_path / "log", echo=False, sample=lambda pid: sample.Sampler(pid, interval=0.25))
    assert outcome.exit_code == 0
    return outcome.sampler


def span_of(sampler: sample.Sampler) -> tuple[list[sample.Snapshot], float]:
    span = sampler.snapshots
    return span, span[-1].time_unix - span[0].time_unix


def test_direct_disk_writes_beside_a_run_are_named_by_the_io_signal(tmp_path):
    writer = planted(WRITER, str(tmp_path / "scratch"))
    try:
        span, seconds = span_of(sampled_run(tmp_path, 3.0))
    finally:
        writer.kill()
        writer.wait()
    io = judge.io_signal(span, seconds)
    assert io["verdict"] == "disturbed", io
    assert io["some_share"] >= judge.IO_SOME_LIMIT and io["source"] == "/proc/pressure/io"
    assert io["top"][0]["name"] == "fbtest-io" and io["top"][0]["bytes"] > 64 << 20, io
    words = judge.cause_words(judge.IO, io, seconds)
    assert words.startswith("I/O pressure: some task waited on storage") and "fbtest-io" in words
    # a node sampler's file carries the I/O figures too
    again = [nodes.snapshot_from(nodes.snapshot_json(s)) for s in span]
    assert again == span
    assert not alive({writer.pid})


def test_the_runs_own_writes_are_not_named_as_anothers(tmp_path):
    """The same writer inside the run's tree: the pressure is the host's, the bytes are the run's own."""
    own = Command([sys.executable, "-c", WRITER, str(tmp_path / "scratch"), str(tmp_path / "pid")])
    start = time.monotonic()
    outcome = execute(
        own, tmp_path / "log", echo=False, sample=lambda pid: sample.Sampler(pid, interval=0.25), timeout=3.0
    )
    assert time.monotonic() - start < 30
    span, seconds = span_of(outcome.sampler)
    io = judge.io_signal(span, seconds)
    assert io["some_share"] > 0.0, io  # it wrote: the host's pressure shows it
    assert "fbtest-io" not in {t["name"] for t in io["top"]}, io
    assert not alive({int((tmp_path / "pid").read_text())})


def test_foreign_loopback_traffic_beside_a_one_node_run_is_named(tmp_path):
    pusher = planted(PUSHER)
    try:
        span, seconds = span_of(sampled_run(tmp_path, 3.0))
    finally:
        pusher.kill()
        pusher.wait()
    assert span[0].loopback is not None and span[-1].loopback is not None
    # a 2-rank DDP run on one node: its own exchange (100 MB of gradients x 12 steps) goes through lo
    run = train_result(
        "local",
        img=10.0,
        ranks=2,
        spec={"nodes": 1, "iters": 10, "batches_per_iter": 1},
        gradient_bytes=100e6,
    )
    traffic = judge.traffic_signal(span, run)
    own = 100e6 * 12 * 1.0 * 2 * 2 * judge.TRAFFIC_OVERHEAD  # steps x ring factor x ranks on the node x 2 ways
    assert traffic["interfaces"] == ["lo"] and traffic["own_bytes_expected"] == pytest.approx(own, rel=1e-6)
    assert "through the loopback" in traffic["own_bytes_how"]
    assert traffic["verdict"] == "disturbed" and traffic["foreign_bytes"] > 1e9, traffic
    assert traffic["foreign_bytes"] == pytest.approx(traffic["bytes_moved"] - own, rel=1e-6)
    assert "of foreign traffic on lo" in judge.cause_words(judge.TRAFFIC, traffic, seconds)
    # Horovod under mpirun on one node exchanges through Open MPI's shared memory: none of lo is its own
    horovod = {**run, "engine": "horovod", "spec": {**run["spec"], "controller": "mpi"}}
    assert judge.traffic_signal(span, horovod)["own_bytes_expected"] == 0
    # across nodes the loopback is not the run's path: only the fabric interface counts
    assert judge.traffic_signal(span, {**run, "spec": {**run["spec"], "nodes": 2}})["verdict"] == "not measured"
    assert not alive({pusher.pid})
