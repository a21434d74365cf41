"""Run a Command as its own process group, teeing its output to a log file.

On timeout or Ctrl-C the whole group (launcher and every rank it started) is
killed: SIGTERM first, SIGKILL after a grace period.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from launch.command import Command

GRACE_SECONDS = 5.0


@dataclass
class Outcome:
    exit_code: int
    seconds: float
    log_tail: list[str]
    timed_out: bool = False
    interrupted: bool = False
    first_output_seconds: float | None = None  # command start -> first line printed
    started_unix: float = 0.0


def kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def execute(command: Command, log_path: Path, timeout: float | None = None,
            echo: bool = True, tail_lines: int = 30, cwd: Path | None = None) -> Outcome:
    env = {**os.environ, **command.env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=tail_lines)
    started = time.monotonic()
    started_unix = time.time()
    first_output: list[float] = []
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {command.render()}\n")
        log.flush()
        proc = subprocess.Popen(command.argv, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)

        def pump():
            for line in proc.stdout:
                if not first_output:
                    first_output.append(time.monotonic() - started)
                log.write(line)
                log.flush()
                tail.append(line.rstrip("\n"))
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = interrupted = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except KeyboardInterrupt:
            interrupted = True
            kill_group(proc)
        try:  # ranks that outlived their launcher go too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reader.join(timeout=GRACE_SECONDS)
    return Outcome(proc.returncode if proc.returncode is not None else -9, time.monotonic() - started,
                   list(tail), timed_out, interrupted, first_output[0] if first_output else None,
                   started_unix)
