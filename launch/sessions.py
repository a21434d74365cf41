"""Ending a process started in a session of its own (`start_new_session=True`), and all of it:
SIGTERM to the session, then SIGKILL to what stays. Standard library only (the GPU check's
processes use it too: benchmarks/gpu_check_process)."""

from __future__ import annotations

import os
import signal
import subprocess

KILL_GRACE_S = 5.0


def end_session(proc: subprocess.Popen, term_grace_s: float = 20.0) -> None:
    """SIGTERM to `proc`'s session, waiting up to term_grace_s; then SIGKILL if it stays."""
    for signum, grace in ((signal.SIGTERM, term_grace_s), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
