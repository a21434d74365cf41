"""Run a Command under a keeper (launch.ranks.keeper), teeing its output to a log file.

Every process the command starts lives under the keeper and ends with it. On a
timeout or a stop request (launch.ranks.interrupt) the keeper is told to end the tree;
if fabric-bench itself dies, the keeper notices (its lifeline closes) and does
the same. The console shows only the ranks' progress lines (bench.progress);
everything, verbose MPI/UCX/NCCL output included, goes to the log.
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
from typing import Any, Callable

from bench.progress import PROGRESS_PREFIX
from launch.ranks import keeper
from launch.ranks.command import Command
from launch.ranks import interrupt

# The keeper's own grace (SIGTERM -> SIGKILL) plus time for it to report back.
STOP_WAIT_SECONDS = keeper.GRACE_SECONDS + 5.0
POLL_SECONDS = 0.1  # how often a waiting run looks for a stop request
WATCH_SECONDS = 1.0  # how often it asks the watch (e.g. launch.ranks.heartbeat) whether the run stalled


@dataclass
class Outcome:
    exit_code: int
    seconds: float
    log_tail: list[str]
    timed_out: bool = False
    first_output_seconds: float | None = None  # command start -> first line printed
    started_unix: float = 0.0
    stopped_by: interrupt.Interrupted | None = None  # the stop signal that ended the run (name, exit code)
    stalled: dict | None = None  # what the watch saw when it ended the run
    sampler: Any = None  # launch.disturbance.sample.Sampler: what the host looked like meanwhile

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None

    @property
    def ended_early(self) -> bool:
        """Ended by fabric-bench (time limit, stop signal, stall), not by the command itself."""
        return self.timed_out or self.interrupted or self.stalled is not None


def stop_keeper(proc: subprocess.Popen) -> None:
    """Tell the keeper to end the run's tree and wait; kill its group if it does not answer."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class ProgressEcho:
    """Progress lines only: rewritten in place on a terminal, one per update elsewhere."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = enabled and sys.stdout.isatty()
        self.open_line = False

    def show(self, line: str) -> None:
        if not self.enabled or not line.startswith(PROGRESS_PREFIX):
            return
        text = line[len(PROGRESS_PREFIX) :].strip()
        if self.tty:
            sys.stdout.write("\r\033[K" + text)
            self.open_line = True
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        if self.open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()


def execute(
    command: Command,
    log_path: Path,
    timeout: float | None = None,
    echo: bool = True,
    tail_lines: int = 30,
    cwd: Path | None = None,
    watch: Callable[[], dict | None] | None = None,
    sample: Callable[[int], Any] | None = None,
) -> Outcome:
    """Run `command`; `watch`, asked every WATCH_SECONDS, ends the run by returning what it saw;
    `sample(keeper_pid)` makes a sampler (launch.disturbance.sample) that runs beside the run in
    this process and is stopped when the run ends."""
    env = {**os.environ, **command.env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=tail_lines)
    progress_echo = ProgressEcho(echo)
    started = time.monotonic()
    started_unix = time.time()
    first_output: list[float] = []
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {command.render()}\n")
        log.flush()
        lifeline, lifeline_end = os.pipe()  # we hold the only write end
        try:
            proc = subprocess.Popen(
                keeper.command_line(lifeline, command.argv),
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
                pass_fds=(lifeline,),
            )
        finally:
            os.close(lifeline)

        output = proc.stdout
        assert output is not None  # stdout=PIPE

        def pump() -> None:
            for line in output:
                if not first_output:
                    first_output.append(time.monotonic() - started)
                log.write(line)
                log.flush()
                tail.append(line.rstrip("\n"))
                progress_echo.show(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        sampler = sample(proc.pid).start() if sample is not None else None
        timed_out, stopped, stalled = False, None, None
        deadline = None if timeout is None else started + timeout
        next_watch = started + WATCH_SECONDS
        try:
            while proc.poll() is None:
                if (signum := interrupt.requested()) is not None:
                    stopped = interrupt.Interrupted(signum)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    break
                if watch is not None and time.monotonic() >= next_watch:
                    next_watch += WATCH_SECONDS
                    if (stalled := watch()) is not None:
                        break
                try:
                    proc.wait(timeout=POLL_SECONDS)
                except subprocess.TimeoutExpired:
                    pass
        except KeyboardInterrupt:  # outside stop_requests(): Python's own Ctrl-C
            stopped = interrupt.Interrupted(signal.SIGINT)
        if sampler is not None:
            sampler.stop()
        if timed_out or stopped or stalled:
            stop_keeper(proc)
        os.close(lifeline_end)
        reader.join(timeout=STOP_WAIT_SECONDS)
        progress_echo.close()
    return Outcome(
        proc.returncode if proc.returncode is not None else -9,
        time.monotonic() - started,
        list(tail),
        timed_out,
        first_output[0] if first_output else None,
        started_unix,
        stopped,
        stalled,
        sampler,
    )
