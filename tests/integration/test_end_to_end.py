"""The whole path a site walks, in one test: sweep an emulated fabric, report it,
archive it, replay the archive, compare the replay with the original."""

import json
import os
import shutil
import tarfile

import pytest

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

    sweep = fabric_bench("sweep", str(experiment), "--dir", str(sweep_dir), "--remeasure-disturbed", "0")
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

    report = fabric_bench("report", str(sweep_dir), "--output", str(tmp_path / "report"), "--keep-disturbed")
    assert report.returncode == 0, report.stderr
    data = json.loads((tmp_path / "report" / "report_data.json").read_text())
    plotted = json.dumps(data)
    assert "emu-eth-1g" in plotted and (tmp_path / "report" / "report.html").stat().st_size > 10_000

    archive = tmp_path / "sweep.tar.gz"
    made = fabric_bench("archive", str(sweep_dir), "--output", str(archive), "--experiment", str(experiment))
    assert made.returncode == 0, made.stderr
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "manifest.json" in names and sum(n.endswith("result.json") for n in names) == 2

    replay_dir = tmp_path / "replay"
    replay = fabric_bench("replay", str(archive), "--results", str(replay_dir))
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    replayed = [json.loads(p.read_text()) for p in replay_dir.rglob("result.json")]
    assert sorted(r["world_size"] for r in replayed) == [1, 2]
    originals = {r["run_id"] for r in results}
    assert {
        r["replay_of"]["run_id"] if isinstance(r["replay_of"], dict) else r["replay_of"] for r in replayed
    } == originals

    same = fabric_bench("compare", str(sweep_dir), str(sweep_dir), "--keep-disturbed")
    assert same.returncode == 0, same.stdout + same.stderr
    against = fabric_bench("compare", str(sweep_dir), str(replay_dir), "--json", "--keep-disturbed")
    assert against.returncode in (0, 1), against.stderr  # within tolerance or not: both are answers
    verdict = json.loads(against.stdout)
    assert verdict["within"] == (against.returncode == 0)
    compared = {(m["run"], m["metric"]) for m in verdict["metrics"]}
    assert len({run for run, _ in compared}) == 2  # both runs paired with their replays
    assert any(metric.startswith("throughput") or "img_per_s" in metric for _, metric in compared)
    for m in verdict["metrics"]:
        assert m["ratio"] is None or m["ratio"] == pytest.approx(m["b"] / m["a"])
