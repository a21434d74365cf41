"""Real multi-process TensorFlow training runs on this host's CPUs (Horovod and tf.distribute)."""

import os
import subprocess

import pytest

from launch.runs.run import horovod_built_for
from tests.results import only_result
from tests.conftest import REPO, VENV_BIN, fabric_bench, need
from launch.schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow
TINY = [
    "--model",
    "SmallCNN",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--iters",
    "3",
    "--batches-per-iter",
    "2",
]


def bench_tf_train(*args, env=None, cwd=REPO):
    """`python -m bench.tf_train` as one rank, without a launcher."""
    return subprocess.run(
        [str(VENV_BIN / "python"), "-m", "bench.tf_train", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


# Horovod over gloo too: the host's wheel links TensorFlow's ops to the gloo PyTorch's link
# (containers/horovod/one-gloo.patch), so this run is what proves that link
@pytest.mark.parametrize(
    "engine, controller",
    [("native", None), ("horovod", "mpi"), ("horovod", "gloo")],
    ids=["native", "horovod", "horovod-gloo"],
)
def test_two_ranks_train_to_identical_variables(engine, controller, tmp_path):
    if engine == "horovod":
        need(horovod_built_for("tf"), "Horovod with TensorFlow is not installed (make setup)")
    chosen = ["--controller", controller] if controller else []
    proc = fabric_bench(
        "run", "--framework", "tf", "--engine", engine, *chosen, "--ranks", "2", *TINY, "--results", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = only_result(tmp_path)
    assert r["status"] == "ok" and r["schema_version"] == SCHEMA_VERSION
    assert r["framework"] == "tf" and r["engine"] == engine and r["world_size"] == 2
    assert r["params_max_abs_diff"] == 0.0 and len(r["params_sha256"]) == 1  # bit-identical
    tp = r["throughput"]
    assert tp["total_img_per_s"] > 0 and len(tp["rank_img_per_s"]) == 2
    assert tp["total_img_per_s"] == pytest.approx(sum(tp["rank_img_per_s"]))
    assert len(r["samples"]["total_img_per_s"]) == 3 and len(r["samples"]["rank_compute_img_per_s"]) == 2
    assert 0.0 <= r["comm_fraction"] <= 1.0
    assert r["gradient_bytes"] == 4 * 88584  # SmallCNN's trainable parameters, float32
    assert r["versions"]["tensorflow"].startswith("2.") and r["versions"]["keras"].startswith("3.")
    assert r["argv"][0].endswith("horovodrun" if controller == "gloo" else "mpirun") and "bench.tf_train" in r["argv"]
    assert "TF_USE_LEGACY_KERAS" not in r["env"]
    if engine == "horovod":
        assert r["engine_info"]["controller"] == controller and r["versions"]["horovod"] == "0.28.1"
    else:
        assert r["engine_info"]["collectives"] == "ring" and len(r["engine_info"]["workers"]) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--engine", "mirrored", "--model", "SmallCNN"], "unknown engine 'mirrored' for tf"),
        (["--engine", "native", "--model", "resnet18"], "unknown model 'resnet18' for tf"),
        (["--engine", "native", "--model", "SmallCNN", "--batch-size", "0"], "--batch-size must be >= 1"),
        (["--engine", "native", "--model", "InceptionV3", "--image-size", "64"], "too small for InceptionV3"),
        (["--engine", "native", "--model", "SmallCNN", "--precision", "amp"], "unknown precision 'amp'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = bench_tf_train(*args, "--record-dir", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and message in proc.stderr
    assert not list(tmp_path.iterdir())  # refused before any rank started


def test_a_tf_run_needs_a_tf_model(tmp_path):
    # the CLI's default model is torchvision's resnet18: a tf run must name its own
    proc = fabric_bench("run", "--framework", "tf", "--engine", "native", "--results", str(tmp_path))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "unknown model 'resnet18' for tf" in proc.stderr and "SmallCNN" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_horovod_without_tensorflow_support_is_one_line_and_exit_2(tmp_path):
    # a Horovod whose TensorFlow extension was not built, ahead of the real one on the path
    fake = tmp_path / "site" / "horovod" / "tensorflow"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("raise ImportError('Extension horovod.tensorflow has not been built')\n")
    proc = bench_tf_train(
        "--engine",
        "horovod",
        *TINY,
        "--record-dir",
        str(tmp_path / "ranks"),
        env={"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: Horovod is not built with TensorFlow support")
    assert "Traceback" not in proc.stderr
