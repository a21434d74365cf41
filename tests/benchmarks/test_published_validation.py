"""benchmarks/published_validation.py: the published cases as stored (sources, transcription,
assumptions declared) and the script that holds the predictor to them (arithmetic: seconds)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("published_validation", REPO / "benchmarks" / "published_validation.py")
published = sys.modules.setdefault("published_validation", importlib.util.module_from_spec(spec))
spec.loader.exec_module(published)

CASES = sorted((REPO / "benchmarks" / "published").glob("*.json"))


def test_at_least_five_published_points_sets_each_with_an_exact_source():
    cases = published.cases()
    assert len(cases) == len(CASES) >= 5
    for case in cases:
        src = case["source"]
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]), case["id"]
        assert "/" in src["repository"] and src["path"] and len(src["where"]) > 20


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_transcribed_throughputs_agree_with_the_speedups_the_source_prints(path):
    case = json.loads(path.read_text(encoding="utf-8"))
    if "measured" not in case:
        assert case["not_predicted"] and case["published_efficiency"]
        return
    base = case.get("baseline", {"nodes": 1, "gpus_per_node": 1})
    one = next(
        m for m in case["measured"] if (m["nodes"], m["gpus_per_node"]) == (base["nodes"], base["gpus_per_node"])
    )
    key = "img_per_s" if "img_per_s" in one else "tok_per_s"
    for m in case["measured"]:  # the source's speedup column, rounded to 0.01, is throughput over the baseline's
        assert m[key] / one[key] == pytest.approx(m["speedup"], abs=0.006), m


def test_every_input_the_source_does_not_state_is_marked_assumed(tmp_path):
    for case in published.cases():
        if "measured" in case:
            assert {"parameters", "wire_dtype", "bucket_mb", "backward_share", "node_type", "network"} <= set(
                case["assumed"]
            ), case["id"]
    bad = json.loads(CASES[0].read_text(encoding="utf-8"))
    del bad["assumed"]["bucket_mb"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(published.UsageError, match="neither stated by the source nor marked assumed"):
        published.load(tmp_path / "bad.json")


def test_the_script_prints_every_case_with_its_source_and_predicted_vs_published(capsys):
    assert published.main([]) == 0
    out = capsys.readouterr().out
    for case in published.cases():
        assert case["id"] in out and case["source"]["path"] in out
    assert "NOT PREDICTED" in out and "calibrated:" in out and "uncalibrated:" in out
    assert published.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["rows"]
    assert rows and all(
        r["uncalibrated"]["range"][0] <= r["uncalibrated"]["efficiency"] <= r["uncalibrated"]["range"][1] for r in rows
    )
    # the calibration run is not used to judge itself; every other point is judged
    assert sum(r["calibrated"] is None for r in rows) == sum("measured" in c for c in published.cases())


def test_a_calibration_reproduces_the_published_point_it_was_fitted_on():
    case = next(c for c in published.cases() if c["id"] == "dlperf-pytorch-rn50-fp32")
    w = published.workload(case)
    c = published.cluster_for(case, 8)
    measured_step = 16 * w.batch_size / 5716.79
    cal = published.predict_cluster.calibrate(w, c, 16, measured_step, "2x8")
    p = published.predict_cluster.point(w, c, 16, cal)
    assert p["step_s"] == pytest.approx(measured_step, rel=0.01)


def test_a_bad_case_directory_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{not json")
    assert published.main(["--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable case" in err[0]


@pytest.mark.parametrize(
    "text, why",
    [
        ("[" * 100_000 + "]" * 100_000, "not a readable case (nested more than 64 levels deep"),
        ("[]", "a case of the wrong shape"),
        ('{"id": "x", "source": ["a"]}', "a case of the wrong shape"),
        (
            '{"id": "x", "source": {"repository": "r", "path": "p", "commit": "c", "where": "w"}, "system": {}, '
            '"workload": {"wire_dtype": "float32", "engine": "ddp"}, "assumed": ["wire_dtype"], "measured": [{}], '
            '"calibrate_on": {}}',
            "a case of the wrong shape (KeyError",
        ),
    ],
)
def test_a_hostile_case_is_one_line_and_exit_2(tmp_path, capsys, text, why):
    (tmp_path / "x.json").write_text(text)
    assert published.main(["--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0], err
