"""`fabric-bench compare`: ratios, tolerances, noise from the CIs, exit codes."""

import json

import pytest

from tests.results import train_result
from launch.results import compare as cmp
from tests.conftest import fabric_bench


def result(img, ci=1.0, ranks=2, status="ok", fabric="ethernet", run_id="r"):
    return train_result(
        run_id,
        img=img,
        ci=ci,
        ranks=ranks,
        status=status,
        fabric=fabric,
        comm=0.4,
        spec={"batch_size": 8, "image_size": 32, "precision": "fp32"},
    )


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_within_is_tolerance_or_combined_noise():
    assert cmp.Metric("t", 100, 95, 1, 1, 0.10).within  # 5 % < 10 %
    assert not cmp.Metric("t", 100, 80, 1, 1, 0.10).within  # 20 % > 10 %, noise 1.4
    assert cmp.Metric("t", 100, 80, 15, 15, 0.10).within  # 20 but noise 21: unresolvable
    assert cmp.Metric("t", 100, 80, 1, 1, 0.10).ratio == pytest.approx(0.8)


def test_exit_codes(tmp_path):
    a = write(tmp_path / "a.json", result(100))
    same = write(tmp_path / "b.json", result(97))
    slow = write(tmp_path / "c.json", result(70))
    ok = fabric_bench("compare", str(a), str(same))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    worse = fabric_bench("compare", str(a), str(slow), "--json")
    assert worse.returncode == 1
    data = json.loads(worse.stdout)
    total = next(m for m in data["metrics"] if m["metric"] == "total_img_per_s")
    assert total["ratio"] == pytest.approx(0.7) and total["within"] is False
    loose = fabric_bench(
        "compare", str(a), str(slow), "--tolerance", "total_img_per_s=0.5", "--tolerance", "per_rank_img_per_s=50%"
    )
    assert loose.returncode == 0, loose.stdout
    failed = write(tmp_path / "d.json", result(100, status="failed"))
    assert fabric_bench("compare", str(a), str(failed)).returncode == 1


def test_directories_pair_runs_and_report_the_unpaired(tmp_path):
    for side, img in (("A", 100), ("B", 101)):
        write(tmp_path / side / "r1" / "result.json", result(img, ranks=1, run_id=f"{side}1"))
        write(tmp_path / side / "r2" / "result.json", result(img * 1.8, ranks=2, run_id=f"{side}2"))
    write(tmp_path / "B" / "r4" / "result.json", result(300, ranks=4, run_id="B4"))
    out = fabric_bench("compare", str(tmp_path / "A"), str(tmp_path / "B"), "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and data["failures"] == ["B4: no matching run in A"]
    assert {m["run"] for m in data["metrics"]} == {"ddp/resnet18 x1", "ddp/resnet18 x2"}


def test_bad_input_is_exit_2(tmp_path):
    good = write(tmp_path / "a.json", result(100))
    (tmp_path / "bad.json").write_text("{truncated")
    for args in (
        (str(good), str(tmp_path / "bad.json")),
        (str(good), str(tmp_path / "absent")),
        (str(good), str(good), "--tolerance", "total_img_per_s"),
    ):
        proc = fabric_bench("compare", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_a_disturbed_run_cannot_pass_the_gate_unless_kept(tmp_path):
    a = write(tmp_path / "a.json", result(100))
    noisy = {
        **result(99),
        "schema_version": 3,
        "disturbance": {
            "verdict": "disturbed",
            "causes": [
                {
                    "signal": "stopped",
                    "words": "a process of the run was stopped (SIGSTOP or a debugger): python (pid 7) ~1 s",
                }
            ],
        },
    }
    b = write(tmp_path / "b.json", noisy)
    refused = fabric_bench("compare", str(a), str(b), "--json")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    data = json.loads(refused.stdout)
    assert data["metrics"] == [] and data["left_out"] == [
        "ddp/resnet18 x2: cannot tell: B r was disturbed (a process of the run was stopped (SIGSTOP or a "
        "debugger): python (pid 7) ~1 s)"
    ]
    kept = fabric_bench("compare", str(a), str(b), "--keep-disturbed")
    assert kept.returncode == 0, kept.stdout + kept.stderr
