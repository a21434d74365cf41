"""Reading the ranks' heartbeats (bench.progress) while a run goes on, and naming
the rank that hangs or lags.

A stall: some rank has not started a batch for longer than the stall timeout.
Start-up (imports, rendezvous) is not watched: the clock starts at the first
beat of any rank, and a rank that never beat counts from there. In synchronous training
every rank then stops together, the others blocked in the exchange waiting for
one; the ranks that started the fewest batches are the ones that hang. When all
stopped at the same batch, the culprit cannot be told from outside, and the
stall says so rather than guess.

A straggler (a rank slower than the others over the timed window) is read from the ranks'
records after the run, by the training kind: launch.kinds.train.stragglers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class StallWatch:
    record_dir: Path
    world_size: int
    timeout_s: float

    def beats(self) -> dict[int, dict]:
        found = {}
        for rank in range(self.world_size):
            try:
                found[rank] = json.loads((self.record_dir / f"heartbeat-{rank}.json").read_text().strip())
            except (OSError, ValueError):  # not yet written, or read mid-write: no beat this time
                continue
        return found

    def check(self, now: float | None = None) -> dict | None:
        """None while every rank progresses; else what the stall looks like."""
        now = time.time() if now is None else now
        beats = self.beats()
        if not beats:
            return None
        first = min(b["time_unix"] for b in beats.values())
        last = {r: beats[r]["time_unix"] if r in beats else first for r in range(self.world_size)}
        stopped = sorted(r for r, t in last.items() if now - t > self.timeout_s)
        if not stopped:
            return None
        started = {r: beats[r]["batches_started"] if r in beats else 0 for r in range(self.world_size)}
        fewest = min(started.values())
        hanging = sorted(r for r, n in started.items() if n == fewest)
        return {
            "timeout_s": self.timeout_s,
            "ranks": [
                {
                    "rank": r,
                    "phase": beats.get(r, {}).get("phase"),
                    "batches_started": started[r],
                    "seconds_since_beat": round(now - last[r], 1),
                    "stopped": r in stopped,
                }
                for r in range(self.world_size)
            ],
            # the ranks behind the others; unknown when every rank stopped at the same batch
            "hanging_ranks": hanging if len(hanging) < self.world_size else None,
        }


def stall_reason(stall: dict) -> str:
    stopped = [r for r in stall["ranks"] if r["stopped"]]
    where = ", ".join(f"rank {r['rank']} at {r['phase'] or 'start-up'} batch {r['batches_started']}" for r in stopped)
    if stall["hanging_ranks"] is None:
        who = "every rank stopped at the same batch (which one hangs cannot be told from outside)"
    else:
        who = f"hanging: rank {', '.join(map(str, stall['hanging_ranks']))} (the others wait for it)"
    return f"stalled: no progress for {stall['timeout_s']:g} s ({where}); {who}; all processes ended"
