"""A run proves the device it claims (issue 42, item 4), shown with the real bench programs on this
GPU-less host: asked for GPUs, a rank that sees none ends in one line (exit 2) and writes that line as
its error record; asked for none, it computes on the CPU. No fake GPU: here torch truly sees none."""

import json
import os
import subprocess
import sys

import pytest

from bench.gpu_request import GPUS_REQUESTED_ENV, gpus_requested, launcher_rank, use_gpu
from containers.host import free_ports
from tests.conftest import REPO


def test_the_request_is_read_from_the_launcher_and_absent_means_no_request():
    assert gpus_requested({GPUS_REQUESTED_ENV: "4"}) == 4
    assert gpus_requested({GPUS_REQUESTED_ENV: "0"}) == 0
    assert gpus_requested({}) is None and gpus_requested({GPUS_REQUESTED_ENV: "x"}) is None
    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3 and launcher_rank({"SLURM_PROCID": "5"}) == 5
    assert launcher_rank({}) == 0


def test_no_request_follows_the_framework_and_a_zero_request_never_takes_a_gpu():
    assert use_gpu("torch", 2, env={}) is True and use_gpu("torch", 0, env={}) is False
    assert use_gpu("torch", 8, env={GPUS_REQUESTED_ENV: "0"}) is False  # a CPU run on a GPU host
    assert use_gpu("torch", 1, env={GPUS_REQUESTED_ENV: "1"}) is True


def test_a_request_no_gpu_can_meet_is_one_line_and_an_error_record(tmp_path, capsys):
    with pytest.raises(SystemExit) as ended:
        use_gpu("torch", 0, str(tmp_path), env={GPUS_REQUESTED_ENV: "4", "RANK": "2", "CUDA_VISIBLE_DEVICES": ""})
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "asked for 4 GPUs per node but torch sees none" in err[0]
    (record,) = [json.loads(line) for line in (tmp_path / "rank-2.jsonl").read_text().splitlines()]
    assert record["kind"] == "error" and "torch sees none" in record["error"]


def bench(module: str, args: list[str], env: dict, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", **env}
    return subprocess.run(
        [sys.executable, "-m", module, *args, "--record-dir", str(tmp_path / "ranks")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


def torchrun_env() -> dict:
    return {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_ports(1)[0]),
    }


@pytest.mark.parametrize(
    "module, args",
    [
        (
            "bench.torch_train",
            [
                "--engine",
                "ddp",
                "--model",
                "resnet18",
                "--image-size",
                "32",
                "--batch-size",
                "2",
                "--warmup",
                "0",
                "--iters",
                "1",
                "--batches-per-iter",
                "1",
            ],
        ),
        ("bench.allreduce", ["--backend", "torch", "--max-bytes", "64", "--iters", "1"]),
    ],
)
def test_torch_programs_refuse_to_fall_back_to_the_cpu_when_gpus_were_asked_for(module, args, tmp_path):
    pytest.importorskip("torch")
    proc = bench(module, args, {GPUS_REQUESTED_ENV: "1", **torchrun_env()}, tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "asked for 1 GPU per node but torch sees none" in lines[0], lines
    records = [json.loads(line) for line in (tmp_path / "ranks" / "rank-0.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records] == ["error"]


def test_the_mpi_allreduce_of_a_gpu_run_works_on_device_buffers_or_does_not_start(tmp_path):
    """--backend mpi with GPUs asked for hands device buffers to MPI (bench.transports.MPIDeviceTransport):
    where torch sees no GPU it ends in one line before MPI starts, instead of reducing host buffers."""
    pytest.importorskip("torch")
    proc = bench("bench.allreduce", ["--backend", "mpi", "--max-bytes", "64"], {GPUS_REQUESTED_ENV: "8"}, tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert "asked for 8 GPUs per node but torch sees none" in proc.stderr


def test_a_cpu_run_trains_on_the_cpu_with_gloo(tmp_path):
    pytest.importorskip("torchvision")
    proc = bench(
        "bench.torch_train",
        [
            "--engine",
            "ddp",
            "--model",
            "resnet18",
            "--image-size",
            "32",
            "--batch-size",
            "2",
            "--warmup",
            "0",
            "--iters",
            "1",
            "--batches-per-iter",
            "1",
        ],
        {GPUS_REQUESTED_ENV: "0", **torchrun_env()},
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    train = next(
        json.loads(line)
        for line in (tmp_path / "ranks" / "rank-0.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    )
    assert train["device"] == "cpu" and train["engine_info"]["backend"] == "gloo"


TF_RUNTIME = """
import sys
from bench import train_args
from bench.tf_engines import configure_runtime
args = train_args.validate("tf", train_args.parser("tf").parse_args(
    ["--engine", "native", "--model", "ResNet50", "--image-size", "32", "--record-dir", sys.argv[1]]))
gpu, used = configure_runtime(0, args)
print("GPU", gpu, used["memory_format"])
"""


@pytest.mark.parametrize("requested, code", [("1", 2), ("0", 0)])
def test_tensorflow_refuses_a_gpu_run_it_cannot_see_and_runs_a_cpu_run_on_the_cpu(requested, code, tmp_path):
    pytest.importorskip("tensorflow")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        GPUS_REQUESTED_ENV: requested,
        "CUDA_VISIBLE_DEVICES": "",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    proc = subprocess.run(
        [sys.executable, "-c", TF_RUNTIME, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    if code:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "TensorFlow sees none" in errors[0]
    else:
        assert "GPU False channels_last" in proc.stdout
