"""launch.ranks.heartbeat on heartbeat files as bench.progress writes them."""

from __future__ import annotations

import json

from launch.kinds.train import stragglers
from launch.ranks.heartbeat import StallWatch, stall_reason


def beat(directory, rank, batches, when, phase="train"):
    text = json.dumps({"rank": rank, "phase": phase, "batches_started": batches, "time_unix": when, "pid": 1})
    (directory / f"heartbeat-{rank}.json").write_text(text.ljust(256))


def test_no_stall_while_every_rank_beats(tmp_path):
    watch = StallWatch(tmp_path, 2, 10.0)
    beat(tmp_path, 0, 5, 95.0)
    beat(tmp_path, 1, 5, 96.0)
    assert watch.check(now=100.0) is None


def test_the_rank_behind_is_named_when_the_others_wait_for_it(tmp_path):
    watch = StallWatch(tmp_path, 3, 10.0)
    beat(tmp_path, 0, 7, 50.0)
    beat(tmp_path, 1, 6, 49.0)
    beat(tmp_path, 2, 7, 50.0)
    stall = watch.check(now=100.0)
    assert stall["hanging_ranks"] == [1]
    assert [r["batches_started"] for r in stall["ranks"]] == [7, 6, 7]
    assert "hanging: rank 1" in stall_reason(stall)


def test_start_up_is_not_watched(tmp_path):
    assert StallWatch(tmp_path, 2, 10.0).check(now=1e9) is None


def test_a_rank_that_never_beat_counts_from_the_first_beat_and_is_the_one_behind(tmp_path):
    watch = StallWatch(tmp_path, 2, 10.0)
    beat(tmp_path, 0, 1, 80.0)
    stall = watch.check(now=100.0)
    assert stall["hanging_ranks"] == [1] and stall["ranks"][1]["phase"] is None
    assert "rank 1 at start-up batch 0" in stall_reason(stall)


def test_all_stopped_at_the_same_batch_names_no_culprit(tmp_path):
    watch = StallWatch(tmp_path, 2, 10.0)
    beat(tmp_path, 0, 4, 50.0)
    beat(tmp_path, 1, 4, 50.0)
    stall = watch.check(now=100.0)
    assert stall["hanging_ranks"] is None and "cannot be told" in stall_reason(stall)


def test_a_torn_heartbeat_is_no_beat_not_a_crash(tmp_path):
    (tmp_path / "heartbeat-0.json").write_text('{"rank": 0, "pha')
    assert StallWatch(tmp_path, 1, 10.0).check(now=100.0) is None


def test_stragglers_are_the_ranks_slower_than_the_median_by_more_than_the_share():
    # img/s of the exchange-free step: rank 2 is 2x slower than the others
    found = stragglers([[100.0, 100.0], [104.0, 96.0], [50.0, 50.0], [98.0, 102.0]], batch_size=10)
    assert [s["rank"] for s in found["ranks"]] == [2]
    assert abs(found["ranks"][0]["excess"] - 1.0) < 0.01
    assert stragglers([[100.0], [90.0]], batch_size=10)["ranks"] == []  # 5 % above the median
    assert stragglers([[100.0]], batch_size=10)["ranks"] == []
