"""The keeper: one small process that holds every process of a run, so they end together.

fabric-bench starts each run's command through a keeper (`python -m launch.ranks.keeper
LIFELINE_FD -- ARGV...`). The keeper makes itself a child subreaper
(prctl PR_SET_CHILD_SUBREAPER), so every descendant stays under it, even one that
starts its own session or double-forks, as mpirun's daemons, torchrun's workers
and podman's conmon do. It ends the whole tree (SIGTERM, then SIGKILL after
GRACE_SECONDS) when:

- the command exits: ranks that outlived their launcher go too;
- it receives SIGTERM, SIGINT or SIGHUP (fabric-bench's way of stopping a run);
- fabric-bench dies without a word, even by SIGKILL: the keeper reads a pipe whose
  only writer is fabric-bench, and end-of-file means its parent is gone.

Chosen over cgroups because it needs no root and no delegated cgroup tree: it
works the same on a root CI machine and on a user's laptop. What it cannot hold:
processes Slurm starts on other nodes (srun's steps end when srun does; an sbatch
job is cancelled by its waiter, launch.fleet.sbatch_wait, or by launch.fleet.slurm) and
a SIGKILL of the keeper itself.
The keeper's exit code is the command's, or 128 + the signal that stopped it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import NoReturn

import psutil

from launch.ranks.interrupt import STOP_SIGNALS

GRACE_SECONDS = 3.0
PR_SET_CHILD_SUBREAPER = 36


class Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap() -> None:
    """Collect every child that has exited (orphans re-parented to us included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def descendants() -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.Error:
            pass


def end_tree(grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to every descendant, SIGKILL to what is left after `grace`; returns when none is left."""
    signal_all(descendants(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := descendants()) and time.monotonic() < deadline:
        reap()
        time.sleep(0.05)
    while left := descendants():  # forks made meanwhile are caught on the next pass
        signal_all(left, signal.SIGKILL)
        reap()
        time.sleep(0.02)
    reap()


def watch_lifeline(fd: int) -> None:
    """End-of-file on the lifeline: fabric-bench is gone; stop as if told to."""
    while os.read(fd, 1024):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def raise_stop(signum: int, frame: FrameType | None) -> NoReturn:
    raise Stop(signum)


def keep(lifeline_fd: int, argv: list[str]) -> int:
    for sig in STOP_SIGNALS:
        signal.signal(sig, raise_stop)
    become_subreaper()
    threading.Thread(target=watch_lifeline, args=(lifeline_fd,), daemon=True).start()
    code = 0
    try:
        try:
            child = subprocess.Popen(argv, close_fds=True)
        except OSError as exc:
            print(f"fabric-bench keeper: cannot start {argv[0]}: {exc}", file=sys.stderr, flush=True)
            return 127
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == child.pid:
                child.returncode = os.waitstatus_to_exitcode(status)
                code = 128 - child.returncode if child.returncode < 0 else child.returncode
                break
    except Stop as stop:
        code = 128 + stop.signum
    for sig in STOP_SIGNALS:  # nothing interrupts the clean-up
        signal.signal(sig, signal.SIG_IGN)
    end_tree()
    return code


def command_line(lifeline_fd: int, argv: list[str]) -> list[str]:
    """The argv that runs `argv` under a keeper watching `lifeline_fd`."""
    return [sys.executable, "-m", "launch.ranks.keeper", str(lifeline_fd), "--", *argv]


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: python -m launch.ranks.keeper LIFELINE_FD -- ARGV...", file=sys.stderr)
        sys.exit(2)
    sys.exit(keep(int(sys.argv[1]), sys.argv[3:]))
