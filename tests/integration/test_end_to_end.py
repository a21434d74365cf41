"""The whole path a site walks, in one test: sweep an emulated fabric, report it,
archive it, replay the archive (a dry run first), compare the replay with the original,
and find both in the results index. The one real archive -> replay -> compare round trip of the
suite (tests/launch/test_archive.py's round trip of a plain run asserted the same on 2 more runs;
its checks are here)."""

import json
import os
import shutil
import tarfile

import pytest

from containers.files import sha256_bytes
from tests.conftest import fabric_bench, need

pytestmark = pytest.mark.slow

EXPERIMENT = """
[experiment]
name = "e2e"
repetitions = 1
time_limit_s = 300

[matrix]
nodes = [1, 2]

[run]
framework = "torch"
engine = "ddp"
model = "resnet18"
image_size = 32
batch_size = 8
warmup = 1
iters = 3
batches_per_iter = 2
ranks_per_node = 1
fabric = "emu-eth-1g"
launcher = "emulated"
"""


def test_sweep_report_archive_replay_compare(tmp_path):
    need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated fabrics need root and tc")
    experiment = tmp_path / "e2e.experiment.toml"
    experiment.write_text(EXPERIMENT)
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite")}  # this test's results index

    sweep = fabric_bench("sweep", str(experiment), "--dir", str(sweep_dir), "--remeasure-disturbed", "0", env=env)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in sweep_dir.rglob("result.json")]
    assert sorted(r["world_size"] for r in results) == [1, 2]
    # this host was checked before the runs (the emulated launcher: no Slurm), and the sweep went on
    (checked,) = json.loads((sweep_dir / "summary.json").read_text())["quiet_check"]
    assert checked["host"] == os.uname().nodename and checked["verdict"] in ("quiet", "busy")
    assert f"quiet check: {checked['host']}" in sweep.stdout
    assert all(r["status"] == "ok" and r["params_max_abs_diff"] == 0.0 for r in results)
    two = next(r for r in results if r["world_size"] == 2)
    assert two["link_rate_gbit_s"] == 1.0 and two["spec"]["launcher"] == "emulated"

    report = fabric_bench("report", str(sweep_dir), "--output", str(tmp_path / "report"), "--keep-disturbed", env=env)
    assert report.returncode == 0, report.stderr
    data = json.loads((tmp_path / "report" / "report_data.json").read_text())
    plotted = json.dumps(data)
    assert "emu-eth-1g" in plotted and (tmp_path / "report" / "report.html").stat().st_size > 10_000

    archive = tmp_path / "sweep.tar.gz"
    made = fabric_bench("archive", str(sweep_dir), "--output", str(archive), "--experiment", str(experiment), env=env)
    assert made.returncode == 0, made.stderr
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "manifest.json" in names and sum(n.endswith("result.json") for n in names) == 2

    replay_dir = tmp_path / "replay"
    originals = {r["run_id"] for r in results}
    dry = fabric_bench("replay", str(archive), "--dry-run", "--results", str(replay_dir), env=env)
    assert dry.returncode == 0 and all(run_id in dry.stdout for run_id in originals), dry.stdout + dry.stderr
    assert not replay_dir.exists()  # a dry run runs nothing
    replay = fabric_bench("replay", str(archive), "--results", str(replay_dir), env=env)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    replayed = [json.loads(p.read_text()) for p in replay_dir.rglob("result.json")]
    assert sorted(r["world_size"] for r in replayed) == [1, 2]
    assert {r["replay_of"]["run_id"] for r in replayed} == originals
    by_id = {r["run_id"]: r for r in results}
    for r in replayed:  # each replay names its original, the archive's bytes, and ran the same argv and spec
        link, original = r["replay_of"], by_id[r["replay_of"]["run_id"]]
        assert link["argv_shape_same"] is True and link["archive_sha256"] == sha256_bytes(archive.read_bytes())
        assert r["spec"] == original["spec"] and r["run_id"] != original["run_id"]
    # the results index holds the runs and their replays
    listed = fabric_bench("results", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert {r["run_id"] for r in json.loads(listed.stdout)} == originals | {r["run_id"] for r in replayed}

    same = fabric_bench("compare", str(sweep_dir), str(sweep_dir), "--keep-disturbed", env=env)
    assert same.returncode == 0, same.stdout + same.stderr
    # two result files, a loose tolerance: a replay on 2 shared cores lies within it; a tight one may fail
    two_replayed = next(r for r in replayed if r["world_size"] == 2)
    pair = [
        next(sweep_dir.rglob(f"{two['run_id']}/result.json")),
        next(replay_dir.rglob(f"{two_replayed['run_id']}/result.json")),
    ]
    close = fabric_bench("compare", *map(str, pair), "--default-tolerance", "0.9", "--keep-disturbed", env=env)
    assert close.returncode == 0, close.stdout + close.stderr
    against = fabric_bench("compare", str(sweep_dir), str(replay_dir), "--json", "--keep-disturbed", env=env)
    assert against.returncode in (0, 1), against.stderr  # within tolerance or not: both are answers
    verdict = json.loads(against.stdout)
    assert verdict["within"] == (against.returncode == 0)
    compared = {(m["run"], m["metric"]) for m in verdict["metrics"]}
    assert len({run for run, _ in compared}) == 2  # both runs paired with their replays
    assert any(metric.startswith("throughput") or "img_per_s" in metric for _, metric in compared)
    for m in verdict["metrics"]:
        assert m["ratio"] is None or m["ratio"] == pytest.approx(m["b"] / m["a"])
