"""The timed loop every training benchmark shares: warm-up excluded, each
iteration `batches_per_iter` batches, one img/s sample per iteration."""

from __future__ import annotations

import time
from typing import Callable

from bench.progress import Progress


def timed_iterations(
    batch: Callable[[], None],
    sync: Callable[[], None],
    warmup: int,
    iters: int,
    batches_per_iter: int,
    batch_size: int,
    progress: Progress | None = None,
) -> list[float]:
    """img/s of each timed iteration on this rank; `sync` waits for queued device work;
    `progress` (bench.progress) beats before every batch and hears of each sample."""
    beat = progress.batch_starts if progress is not None else (lambda: None)
    for _ in range(warmup):
        beat()
        batch()
    sync()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        for _ in range(batches_per_iter):
            beat()
            batch()
        sync()
        samples.append(batch_size * batches_per_iter / (time.perf_counter() - start))
        if progress is not None:
            progress(samples[-1])
    return samples
