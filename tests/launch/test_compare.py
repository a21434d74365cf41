"""`fabric-bench compare`: ratios, tolerances, noise from the CIs, exit codes; each kind's figures with
its direction and tolerance (real allreduce and halo runs), and kinds that differ refused."""

import json

import pytest

from tests.results import allreduce_result, train_result
from launch.analysis import compare as cmp
from tests.conftest import fabric_bench, rank_pids


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


# ---------------------------------------------------- each kind's figures, direction and tolerance


def test_a_worse_candidate_fails_in_the_figure_s_direction_and_a_better_one_passes():
    time = dict(ci_a=0.0, ci_b=0.0, tolerance=0.10, higher_is_better=False)  # lower is better
    assert cmp.Metric("t", 1.0, 1.3, **time).change == "worse" and not cmp.Metric("t", 1.0, 1.3, **time).within
    assert cmp.Metric("t", 1.0, 0.7, **time).change == "better" and cmp.Metric("t", 1.0, 0.7, **time).within
    assert cmp.Metric("t", 1.0, 1.05, **time).change == "within"
    rate = dict(ci_a=0.0, ci_b=0.0, tolerance=0.10)  # higher is better (the default)
    assert cmp.Metric("b", 1.0, 0.7, **rate).change == "worse" and cmp.Metric("b", 1.0, 1.3, **rate).within


def test_two_results_of_different_kinds_are_refused_in_one_line(tmp_path):
    train = write(tmp_path / "train.json", result(100))
    sweep = write(tmp_path / "sweep.json", allreduce_result("s", sizes=[{"bytes": 1024, "busbw_gbit_s": 1.0}]))
    proc = fabric_bench("compare", str(train), str(sweep))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert "A r (train) and B s (allreduce) are results of different kinds" in proc.stderr


def one_run(results_dir, *args: str) -> dict:
    """A real 2-rank run on this host (the local launcher), its result.json."""
    proc = fabric_bench("run", "--ranks", "2", "--iters", "5", "--warmup", "1", "--results", str(results_dir), *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (path,) = results_dir.glob("*/result.json")
    return json.loads(path.read_text())


def slowed(found: dict, factor: float) -> dict:
    """The run as if every timed operation had taken `factor` times as long (its figures agreeing
    with its samples, so compare finds no edit): a halo run's times, a sweep's times and bandwidths."""
    out = json.loads(json.dumps(found))
    out["run_id"] += f"-x{factor:g}"
    if "samples_s" in out:
        for name in ("time_per_iter_s", "time_per_iter_mean_s", "ci95_s"):
            if out.get(name) is not None:
                out[name] *= factor
        out["samples_s"] = [s * factor for s in out["samples_s"]]
    for row in out.get("sizes") or []:
        for name in ("time_us", "time_us_mean", "ci95_us"):
            if row.get(name) is not None:
                row[name] *= factor
        row["samples_us"] = [s * factor for s in row["samples_us"]]
        for name in ("algbw_gbit_s", "busbw_gbit_s"):
            row[name] /= factor
    return out


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """A 2-rank allreduce over MPI at small sizes and a halo exchange on a small grid, run for real."""
    import shutil
    import time

    from tests.conftest import alive, need

    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    root = tmp_path_factory.mktemp("real")
    runs = {
        "allreduce": one_run(root / "allreduce", "--benchmark", "allreduce", "--backend", "mpi", "--max-bytes", "4096"),
        "halo": one_run(root / "halo", "--benchmark", "halo", "--grid", "16"),
    }
    pids = rank_pids(root / "allreduce") | rank_pids(root / "halo")
    assert len(pids) == 4
    time.sleep(0.5)
    assert not alive(pids)
    return runs


def compared(tmp_path, a: dict, b: dict, *args: str):
    """`compare` of A and B; their disturbance (this host is shared) is docs/disturbance.md's concern."""
    a_path, b_path = write(tmp_path / "a.json", a), write(tmp_path / "b.json", b)
    proc = fabric_bench("compare", str(a_path), str(b_path), "--keep-disturbed", *args)
    return proc, (json.loads(proc.stdout) if proc.returncode != 2 and "--json" in args else None)


@pytest.mark.slow
def test_a_halo_run_s_figure_of_merit_is_compared_lower_is_better(real_runs, tmp_path):
    halo = real_runs["halo"]
    same, data = compared(tmp_path, halo, halo, "--json")
    assert same.returncode == 0, same.stdout + same.stderr
    assert {m["metric"] for m in data["metrics"]} == {"time_per_iter_s", "comm_fraction"}
    figure = next(m for m in data["metrics"] if m["metric"] == "time_per_iter_s")
    assert figure["unit"] == "s" and figure["higher_is_better"] is False and figure["tolerance"] == 0.10
    assert data["metrics"][0]["run"] == "mpi/halo 16^3 x2"
    slower, data = compared(tmp_path, halo, slowed(halo, 10.0), "--json")  # beyond any run's noise
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert [m["change"] for m in data["metrics"] if m["metric"] == "time_per_iter_s"] == ["worse"]
    assert data["failures"][0].startswith("mpi/halo 16^3 x2 time_per_iter_s:")
    faster, data = compared(tmp_path, halo, slowed(halo, 0.1), "--json")
    assert faster.returncode == 0 and data["failures"] == [], faster.stdout
    assert [m["change"] for m in data["metrics"] if m["metric"] == "time_per_iter_s"] == ["better"]


@pytest.mark.slow
def test_an_allreduce_run_s_busbw_is_compared_at_every_size(real_runs, tmp_path):
    sweep = real_runs["allreduce"]
    sizes = [row["bytes"] for row in sweep["sizes"]]
    assert sizes == [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    same, data = compared(tmp_path, sweep, sweep, "--json")
    assert same.returncode == 0, same.stdout + same.stderr
    assert [m["metric"] for m in data["metrics"]] == [f"busbw_gbit_s@{n}" for n in sizes]
    assert all(m["unit"] == "Gbit/s" and m["higher_is_better"] and m["ratio"] == 1.0 for m in data["metrics"])
    slower, data = compared(tmp_path, sweep, slowed(sweep, 10.0), "--json")  # beyond any run's noise
    assert slower.returncode == 1 and data["failures"], slower.stdout + slower.stderr
    assert {m["change"] for m in data["metrics"]} == {"worse"}  # a tenth of the bandwidth at every size
    assert all(m["ratio"] == pytest.approx(0.1, rel=1e-6) for m in data["metrics"])
    loose, _ = compared(tmp_path, sweep, slowed(sweep, 2.0), "--tolerance", "busbw_gbit_s=0.6")
    assert loose.returncode == 0, loose.stdout + loose.stderr  # the tolerance by the figure's name
    faster, data = compared(tmp_path, sweep, slowed(sweep, 0.1), "--json")
    assert faster.returncode == 0 and {m["change"] for m in data["metrics"]} == {"better"}, faster.stdout


@pytest.mark.slow
def test_a_halo_and_an_allreduce_run_are_refused_in_one_line(real_runs, tmp_path):
    proc, _ = compared(tmp_path, real_runs["halo"], real_runs["allreduce"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert "(halo) and B" in proc.stderr and "(allreduce) are results of different kinds" in proc.stderr
