"""A rank's progress: a heartbeat per batch, a record per timed iteration.

- Heartbeat: before every batch (warm-up included; for the communication
  benchmarks, every allreduce or halo step) each rank overwrites
  `<record_dir>/heartbeat-<rank>.json` with how many batches it has started, the
  phase and the time. The launcher reads these while the run goes on: ranks that
  stop beating are a stall, and the rank that has started fewest batches while
  the others wait in the exchange is the one that hangs.
- Progress record: after every timed iteration each rank appends a `progress`
  record (phase, step reached, the img/s sample, time): the samples an
  interrupted or stalled run still reports. Rank 0 also prints one line per
  iteration starting with PROGRESS_PREFIX; the launcher's console shows only those.
- A test-only fault (FAULT_ENV = "RANK:SECONDS" or "RANK:SECONDS@BATCH"): that rank
  sleeps SECONDS before every batch (a straggler), or once before batch BATCH (a
  hang). Tests use it to check that exactly that rank is named.
"""

from __future__ import annotations

import json
import os
import time

from bench.record import write_record

PROGRESS_PREFIX = "[fabric-bench progress]"
FAULT_ENV = "FABRIC_BENCH_TEST_FAULT"
HEARTBEAT_BYTES = 256  # fixed size: each beat overwrites the last in one write


def heartbeat_path(record_dir: str | os.PathLike, rank: int) -> str:
    return os.path.join(record_dir, f"heartbeat-{rank}.json")


def injected_fault(rank: int) -> tuple[float, int | None] | None:
    """(seconds, batch or None for every batch) when the test-only fault names this rank."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return None
    target, _, rest = spec.partition(":")
    seconds, _, batch = rest.partition("@")
    if int(target) != rank:
        return None
    return float(seconds), int(batch) if batch else None


class Progress:
    def __init__(self, record_dir: str, rank: int, world_size: int, phase: str, iters: int, batches_started: int = 0):
        self.record_dir, self.rank, self.world_size = record_dir, rank, world_size
        self.phase, self.iters = phase, iters
        self.samples: list[float] = []
        self.batches_started = batches_started  # over all phases of this rank
        self.fault = injected_fault(rank)
        os.makedirs(record_dir, exist_ok=True)
        self._beat_fd = os.open(heartbeat_path(record_dir, rank), os.O_WRONLY | os.O_CREAT, 0o644)

    def next_phase(self, phase: str) -> "Progress":
        """The same rank's progress through its next phase (the batch count goes on)."""
        os.close(self._beat_fd)
        return Progress(self.record_dir, self.rank, self.world_size, phase, self.iters, self.batches_started)

    def batch_starts(self) -> None:
        self.batches_started += 1
        if self.fault is not None:
            seconds, batch = self.fault
            if batch is None or batch == self.batches_started:
                time.sleep(seconds)
        beat = json.dumps(
            {
                "rank": self.rank,
                "phase": self.phase,
                "batches_started": self.batches_started,
                "time_unix": time.time(),
                "pid": os.getpid(),
            }
        )
        os.pwrite(self._beat_fd, beat.ljust(HEARTBEAT_BYTES).encode()[:HEARTBEAT_BYTES], 0)

    def __call__(self, sample_img_per_s: float) -> None:
        """One timed iteration finished with this img/s sample."""
        self.samples.append(sample_img_per_s)
        step = len(self.samples)
        write_record(
            self.record_dir,
            self.rank,
            "progress",
            phase=self.phase,
            step=step,
            iters=self.iters,
            sample_img_per_s=sample_img_per_s,
            step_end_unix=time.time(),
        )
        if self.rank == 0:
            mean = sum(self.samples) / step
            print(
                f"{PROGRESS_PREFIX} {self.phase} iteration {step}/{self.iters}: "
                f"{mean * self.world_size:.1f} img/s ({self.world_size} ranks)",
                flush=True,
            )
