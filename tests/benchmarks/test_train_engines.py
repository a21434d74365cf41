"""benchmarks/train_engines.py's set-up order: a DDP result before Horovod is built; the TensorFlow side
only when TensorFlow rows are asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, VENV_BIN


def shadowed_horovod(tmp_path, *ops: str) -> dict:
    """The environment of a run whose Horovod is a package with only the ops folders `ops` (no
    extension in them), shadowing the suite's: a venv where Horovod lacks those frameworks' ops."""
    fake = tmp_path / "shadow" / "horovod"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    for folder in ops:
        (fake / folder).mkdir()
    return {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 'shadow'}{os.pathsep}{REPO}",
        "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite"),
    }


@pytest.mark.slow  # runs the real set-up against the suite's venv (every phase finds its inputs: ~1 min)
def test_tensorflow_rows_get_the_tensorflow_side_first_and_say_why(tmp_path):
    """A venv whose Horovod has no TensorFlow ops (here: a Horovod package without them shadowing the
    suite's) runs scripts/setup.sh --tensorflow before any TensorFlow run, with a line saying why;
    PyTorch rows alone never do."""
    env = shadowed_horovod(tmp_path, "tensorflow")
    argv = [
        str(VENV_BIN / "python"),
        "benchmarks/train_engines.py",
        "--iters",
        "0",
        "--results",
        str(tmp_path / "results"),
    ]
    proc = subprocess.run([*argv, "--frameworks", "tf"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("set-up: the TensorFlow runs need TensorFlow and Horovod's TensorFlow ops")
    assert any(line.startswith("setup: horovod wheel ") for line in lines), proc.stdout + proc.stderr
    assert proc.returncode == 2 and "--iters 0 is refused" in proc.stderr  # then the runs, refused here
    torch_only = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert torch_only.returncode == 2 and "set-up:" not in torch_only.stdout and "setup:" not in torch_only.stdout


@pytest.mark.slow  # a tiny DDP run, the real set-up against the suite's venv (~1 min), two tiny runs
def test_a_venv_without_horovod_prints_a_ddp_result_before_building_it(tmp_path):
    """A fresh `make bench` (Horovod not built: here a Horovod package without its PyTorch ops shadows
    the suite's) shows a DDP result first, then builds Horovod, then runs the engines side by side."""
    env = shadowed_horovod(tmp_path)
    results = tmp_path / "results"
    proc = subprocess.run(
        [
            str(VENV_BIN / "python"),
            "benchmarks/train_engines.py",
            "--ranks",
            "1",
            "--model",
            "resnet18",
            "--image-size",
            "32",
            "--batch-size",
            "2",
            "--warmup",
            "0",
            "--iters",
            "2",
            "--batches-per-iter",
            "1",
            "--results",
            str(results),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = proc.stdout
    first, building, wheel = (
        out.find(s) for s in ("first result: torch ddp x1", "set-up: building Horovod", "setup: horovod wheel ")
    )
    assert -1 < first < out.find("img/s", first) < building < wheel, out + proc.stderr
    # the first result is kept; after the set-up the engines' runs start, Horovod first: refused here in
    # one line, its ops being shadowed
    engines = sorted(json.loads(p.read_text())["engine"] for p in results.glob("*/result.json"))
    assert engines == ["ddp"], engines
    assert proc.returncode == 2 and "Horovod with torch support is not installed here" in proc.stderr


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs the suite's venv")
def test_the_suites_venv_has_the_tensorflow_side():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import train_engines
    finally:
        sys.path.pop(0)
    assert train_engines.tensorflow_side_ready()  # make test sets it up (scripts/setup.sh --test)
