"""bench.tf_cuda: TensorFlow's CUDA 12 libraries first on the library path of a TensorFlow
process in the cuda image (issue 38). The self-test half (`--check`) runs in the image's %test:
its output is in the cuda rehearsal records (tests/containers/test_rehearsals.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import tf_cuda

PROGRAM = """
import os, sys
from bench import tf_cuda
if "FB_STARTED" not in os.environ:
    os.environ["FB_STARTED"] = str(os.getpid())
    print("started", os.getpid(), flush=True)
tf_cuda.on_library_path()
print("running", os.getpid(), os.environ.get("LD_LIBRARY_PATH", ""), sys.argv[1:], flush=True)
"""


def run(env: dict[str, str]) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, "--engine", "native"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        cwd=tf_cuda.__file__.rsplit("/bench/", 1)[0],
    )
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 3) for line in done.stdout.splitlines()]


def test_the_process_replaces_itself_once_with_the_libraries_first(tmp_path):
    for name in ("cudnn", "cublas", "nccl"):
        (tmp_path / "nvidia" / name / "lib").mkdir(parents=True)
    (tmp_path / "nvidia" / "include-only").mkdir()  # a wheel without lib/ adds nothing
    lines = run({tf_cuda.ENV: str(tmp_path), "LD_LIBRARY_PATH": "/opt/site/lib"})
    assert [line[0] for line in lines] == ["started", "running"]  # one re-exec, no loop
    assert lines[0][1] == lines[1][1]  # the same pid: mpirun's rank stays
    wanted = [str(tmp_path / "nvidia" / n / "lib") for n in ("cublas", "cudnn", "nccl")]
    assert lines[1][2].split(":") == [*wanted, "/opt/site/lib"]
    assert lines[1][3] == "['--engine', 'native']"  # argv kept


def test_outside_the_cuda_image_nothing_happens(tmp_path):
    lines = run({"LD_LIBRARY_PATH": "/opt/site/lib"} | ({tf_cuda.ENV: ""}))
    assert [line[0] for line in lines] == ["started", "running"] and lines[1][2] == "/opt/site/lib"


def test_the_check_refuses_a_folder_without_libraries(tmp_path, monkeypatch):
    monkeypatch.setenv(tf_cuda.ENV, str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "bench.tf_cuda", "--check"],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout.startswith("tf-cuda: ") and "names no folder" in done.stdout
