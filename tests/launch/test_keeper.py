"""launch.ranks.keeper with plain processes: a grandchild in a session of its own (as
mpirun's and torchrun's children make them) still ends with the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launch.ranks import keeper
from tests.conftest import alive

# A command that leaves a grandchild behind in a new session, writes its pid, then waits.
ORPHAN_MAKER = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(float(sys.argv[2]))
sys.exit(int(sys.argv[3]))
"""


def start(tmp_path: Path, wait_s: float, code: int) -> tuple[subprocess.Popen, int, Path]:
    pid_file = tmp_path / "grandchild.pid"
    lifeline, lifeline_end = os.pipe()
    proc = subprocess.Popen(
        keeper.command_line(lifeline, [sys.executable, "-c", ORPHAN_MAKER, str(pid_file), str(wait_s), str(code)]),
        pass_fds=(lifeline,),
        start_new_session=True,
    )
    os.close(lifeline)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, lifeline_end, pid_file


def gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive({pid}):
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


def test_the_command_exit_code_passes_through_and_its_orphans_go(tmp_path):
    proc, lifeline_end, pid_file = start(tmp_path, 0.5, 3)
    assert proc.wait(timeout=30) == 3
    assert gone(int(pid_file.read_text()))
    os.close(lifeline_end)


def test_sigterm_ends_the_tree_and_reports_the_signal(tmp_path):
    proc, lifeline_end, pid_file = start(tmp_path, 300, 0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert gone(int(pid_file.read_text()))
    os.close(lifeline_end)


def test_a_closed_lifeline_ends_the_tree(tmp_path):
    """What a SIGKILLed fabric-bench leaves: nobody holds the write end any more."""
    proc, lifeline_end, pid_file = start(tmp_path, 300, 0)
    os.close(lifeline_end)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert gone(int(pid_file.read_text()))


def test_a_command_that_cannot_start_is_exit_127(tmp_path):
    lifeline, lifeline_end = os.pipe()
    proc = subprocess.run(
        keeper.command_line(lifeline, [str(tmp_path / "missing")]),
        pass_fds=(lifeline,),
        capture_output=True,
        text=True,
        timeout=30,
    )
    os.close(lifeline)
    os.close(lifeline_end)
    assert proc.returncode == 127 and "cannot start" in proc.stderr
