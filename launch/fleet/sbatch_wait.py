"""`sbatch --wait` that notices the job's end within a second.

sbatch's own --wait polls the job at growing intervals (2, 10, 42, 74 s: x4 up to 32 s), so
a job that ends after 11 s is seen at 42 s. This program submits with `sbatch --parsable`,
prints what sbatch printed (the job id), then asks `scontrol show job` about once a second
and exits as `sbatch --wait` does: with the job's exit code, 1 for a job ended by a signal.

    python -m launch.fleet.sbatch_wait SCRIPT

It stays a program of its own (launch.ranks.execute runs it under the run's keeper, with
the run's time limit and stop signals): on SIGTERM, SIGINT or SIGHUP it cancels its job
before it exits (128 + the signal). A job Slurm no longer knows, its exit code unread
(purged after MinJobAge, or lost by slurmctld), exits VANISHED with one line on stderr.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

MODULE = "launch.fleet.sbatch_wait"
POLL_S = 1.0
QUERY_TIMEOUT_S = 15
VANISHED = 1  # sbatch --wait exits 0 there, as if the job had succeeded
SUBMITTER = "sbatch"  # the tool a run needs on this host (preflight checks it)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # launch.ranks.interrupt's (a room above)
# the job's base state has ended: sbatch's IS_JOB_FINISHED (COMPLETING: its epilog is still running)
FINISHED = {
    "COMPLETED",
    "COMPLETING",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
}


def argv(script: Path) -> list[str]:
    """The command that submits `script` and waits for its job (in place of `sbatch --wait`)."""
    return [sys.executable, "-m", MODULE, str(script)]


def submitter(command: list[str]) -> str | None:
    """SUBMITTER where `command` is this waiter's (what it needs on PATH), else None."""
    return SUBMITTER if command[1:3] == ["-m", MODULE] else None


class Job:
    """A submitted job: its id and the cluster sbatch named (`--parsable` prints ID[;CLUSTER])."""

    def __init__(self, parsable: str):
        self.id, _, cluster = parsable.strip().partition(";")
        self.where = [f"--clusters={cluster}"] if cluster else []

    def state(self) -> tuple[str | None, str | None]:
        """(JobState, ExitCode) from scontrol; ("gone", None) once Slurm no longer knows the job,
        (None, None) when slurmctld did not answer (asked again next time)."""
        try:
            proc = subprocess.run(
                ["scontrol", *self.where, "show", "job", "-o", self.id],
                capture_output=True,
                text=True,
                timeout=QUERY_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None, None
        if proc.returncode != 0:
            return ("gone", None) if "Invalid job id" in proc.stderr else (None, None)
        fields = dict(token.split("=", 1) for token in proc.stdout.split() if "=" in token)
        return fields.get("JobState"), fields.get("ExitCode")

    def cancel(self) -> None:
        """scancel the job; a refusal is said in one line on stderr."""
        try:
            proc = subprocess.run(
                ["scancel", *self.where, self.id], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
            )
            why = proc.stderr.strip() if proc.returncode != 0 else None
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
        if why:
            print(f"sbatch_wait: could not cancel job {self.id}: {why}", file=sys.stderr)


def exit_code(slurm_exit: str | None) -> int:
    """sbatch --wait's exit code from Slurm's ExitCode=STATUS:SIGNAL: the status, 1 if a signal ended the job."""
    status, _, signum = (slurm_exit or "").partition(":")
    if not status.isdigit() or signum not in ("", "0"):
        return 1
    return int(status)


class Stopped:
    """The first stop signal received; the waiter reads it between its queries."""

    signum: int | None = None

    @classmethod
    def note(cls, signum: int, frame: FrameType | None) -> None:
        cls.signum = cls.signum or signum


def follow(job: Job) -> int:
    """Wait for `job` to finish; its exit code, or 128 + a stop signal once the job is cancelled."""
    said_unanswered = False
    while True:
        if Stopped.signum is not None:
            job.cancel()
            return 128 + Stopped.signum
        state, code = job.state()
        if state == "gone":
            print(f"sbatch_wait: job {job.id} is no longer known to Slurm and left no exit code", file=sys.stderr)
            return VANISHED
        if state in FINISHED:
            return exit_code(code)
        if state is None and not said_unanswered:
            print(f"sbatch_wait: Slurm did not answer about job {job.id}; asking again", file=sys.stderr, flush=True)
            said_unanswered = True
        deadline = time.monotonic() + POLL_S
        while Stopped.signum is None and time.monotonic() < deadline:
            time.sleep(0.05)


def main(script: str) -> int:
    for sig in STOP_SIGNALS:  # noted, not raised: a job submitted meanwhile is still cancelled
        signal.signal(sig, Stopped.note)
    try:
        submitted = subprocess.run([SUBMITTER, "--parsable", script], stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        print(f"sbatch_wait: cannot run {SUBMITTER}: {exc}", file=sys.stderr)
        return 127
    if submitted.returncode != 0:  # sbatch said why on stderr, or a stop signal ended it
        return 128 - submitted.returncode if submitted.returncode < 0 else submitted.returncode
    print(submitted.stdout.strip(), flush=True)
    return follow(Job(submitted.stdout))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m launch.fleet.sbatch_wait SCRIPT", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
