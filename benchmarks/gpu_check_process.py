"""The GPU check's processes (benchmarks/gpu_check.py): its log, and one command under a deadline
(its whole session ended past it: launch.sessions)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from launch.sessions import end_session

REPO = Path(__file__).resolve().parents[1]


class Log:
    """Print to the console and to OUT/gpu_check.log."""

    def __init__(self, path: Path):
        self.file = open(path, "w", encoding="utf-8")

    def __call__(self, *parts: object) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def execute(argv: list[str], log_path: Path, env: dict, timeout_s: float, log: Log) -> int:
    """Run one command in its own session, its output to the console, the check's log and log_path;
    past the timeout, output or none: SIGTERM to the whole session (fabric-bench ends its ranks),
    then SIGKILL. A reader thread copies the output, so a silent hang still meets the deadline."""
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,
            errors="replace",
        )

        def copy_output() -> None:
            assert proc.stdout is not None  # stdout=PIPE above
            for line in proc.stdout:
                out.write(line)
                log.file.write(line)
                print(line, end="", flush=True)

        reader = threading.Thread(target=copy_output, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            log(f"  ... no end after {timeout_s:.0f} s: stopping it")
            code = 124
            end_session(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)
        return code
