"""A rehearsal's phases and their seconds: each phase announced as it starts, its seconds printed
as it ends, and the table of all of them at the end (benchmarks/two_sites.py, three_sites.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    def __init__(self) -> None:
        self.seconds: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        yield
        self.seconds.append((name, time.monotonic() - started))
        print(f"   {name}: {self.seconds[-1][1]:.1f} s", flush=True)

    def print_table(self) -> None:
        print("phase timings:")
        for name, seconds in self.seconds:
            print(f"  {seconds:7.1f} s  {name}")
        print(f"  {sum(s for _, s in self.seconds):7.1f} s  in all")
