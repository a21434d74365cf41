"""A site's cluster description, a node's probe report, a sweep's summary, and site and
experiment files (which archives carry) may all have been written at another site: one nested
100k deep, too large, or not a file at all (a FIFO) is one line and exit 2, or left out, never
a RecursionError or a read without end (issue 41)."""

from __future__ import annotations

import json
import os

import pytest

from launch.errors import UsageError
from launch.predict import cluster
from launch.analysis import verdict
from tests.conftest import fabric_bench
from tests.launch.test_predict import train_result

BOMB = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("option", ["--cluster-file", "--probe-json"])
@pytest.mark.parametrize("kind, line", [("bomb", "nested more than 64 levels deep"), ("fifo", "not a regular file")])
def test_predict_refuses_a_hostile_description_in_one_line(tmp_path, option, kind, line):
    train = tmp_path / "result.json"
    train.write_text(json.dumps(train_result(ranks=1)))
    path = tmp_path / "cluster.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(BOMB)
    proc = fabric_bench("predict", "--train", str(train), option, str(path), timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert line in proc.stderr and option in proc.stderr and "Traceback" not in proc.stderr


def test_a_huge_description_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "cluster.json"
    with path.open("wb") as f:
        f.truncate(2**30)
    with pytest.raises(UsageError, match="larger than 16 MiB"):
        cluster.from_site_file(path)


def test_a_sweep_summary_nested_100k_deep_is_left_out_of_the_verdict_orders(tmp_path):
    (tmp_path / "summary.json").write_text(BOMB)
    assert verdict.experiment_orders([tmp_path]) == {}


@pytest.mark.parametrize(
    "kind, line",
    [
        ("bomb", "experiment file is nested too deeply"),
        ("fifo", "cannot read experiment file: not a regular file"),
        ("huge", "cannot read experiment file: larger than 4 MiB"),
    ],
)
def test_an_experiment_or_site_file_that_is_hostile_is_one_line(tmp_path, kind, line):
    """Archives carry their site and experiment files; tomllib stops a nesting bomb only with
    a RecursionError."""
    path = tmp_path / "x.experiment.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(5 * 2**20)
    else:
        path.write_text("[experiment]\nname = 'x'\n[run]\nmodel = " + BOMB + "\n")
    proc = fabric_bench("sweep", str(path), "--dry-run", "--dir", str(tmp_path / "sweep"), timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert line in proc.stderr and "Traceback" not in proc.stderr and not (tmp_path / "sweep").exists()
