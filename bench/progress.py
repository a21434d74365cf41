"""A rank's progress through its timed iterations.

Every rank appends a `progress` record per timed iteration (phase, step reached,
the img/s sample, time): the heartbeat the launcher reads while a run goes on,
and the samples an interrupted run still reports. Rank 0 also prints one line
per iteration starting with PROGRESS_PREFIX; the launcher's console shows only
those lines (everything else goes to the run's log).
"""
from __future__ import annotations

import time

from bench.record import write_record

PROGRESS_PREFIX = "[fabric-bench progress]"


class Progress:
    def __init__(self, record_dir: str, rank: int, world_size: int, phase: str, iters: int):
        self.record_dir, self.rank, self.world_size = record_dir, rank, world_size
        self.phase, self.iters = phase, iters
        self.samples: list[float] = []

    def __call__(self, sample_img_per_s: float) -> None:
        self.samples.append(sample_img_per_s)
        step = len(self.samples)
        write_record(self.record_dir, self.rank, "progress", phase=self.phase, step=step, iters=self.iters,
                     sample_img_per_s=sample_img_per_s, step_end_unix=time.time())
        if self.rank == 0:
            mean = sum(self.samples) / step
            print(f"{PROGRESS_PREFIX} {self.phase} iteration {step}/{self.iters}: "
                  f"{mean * self.world_size:.1f} img/s ({self.world_size} ranks)", flush=True)
