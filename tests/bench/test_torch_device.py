"""The GPU a torch rank takes and the device its collectives run on, proven on CPUs with real
process groups whose backend map is the one NCCL has: registered for cuda only."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from bench import placement
from containers.host import free_ports
from tests.conftest import REPO

torch = pytest.importorskip("torch")  # the bench programs' own dependency


def test_a_rank_that_sees_one_gpu_takes_device_0():
    """srun --gpus-per-task / --gpu-bind: local rank 3 sees one GPU, which is its device 0."""
    from bench.torch_device import gpu_index

    assert [gpu_index(local_rank, 1) for local_rank in range(4)] == [0, 0, 0, 0]
    assert [gpu_index(local_rank, 4) for local_rank in range(4)] == [0, 1, 2, 3]
    assert gpu_index(5, 4) == 1 and gpu_index(2, 0) == 0


PARAMETER_CHECK = textwrap.dedent("""
    import argparse, json, sys, torch
    from bench.torch_engines import DDPEngine
    from bench.torch_train import parameter_check
    engine = DDPEngine(argparse.Namespace(backend=sys.argv[1], bucket_cap_mb=25.0))
    model = torch.nn.Linear(3, 2)
    try:
        diff, digest = parameter_check(torch, model, engine)
        out = {"ok": True, "diff": diff, "device": str(engine.collective_device)}
    except Exception as exc:
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "device": str(engine.collective_device)}
    engine.shutdown()
    print("RESULT " + json.dumps(out))
""")


def parameter_check_under(backend: str) -> dict:
    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_ports(1)[0]),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": str(REPO),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PARAMETER_CHECK, backend], capture_output=True, text=True, timeout=180, env=env, cwd=REPO
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, proc.stderr[-2000:]
    return json.loads(line.split(" ", 1)[1])


def test_the_parameter_check_runs_on_a_group_with_a_cpu_backend():
    result = parameter_check_under("cpu:gloo")
    assert result == {"ok": True, "diff": 0.0, "device": "cpu"}


def test_the_parameter_check_never_hands_a_cuda_only_group_a_cpu_tensor():
    """NCCL registers for cuda only, as gloo does here under "cuda:gloo": the DDP parameter check
    broadcast a CPU tensor and failed with "No backend type associated with device type cpu",
    after every timed DDP run on a GPU (issue 29). Now the broadcast goes to the rank's GPU; on
    this GPU-less host that move is what fails, never the group's backend lookup."""
    result = parameter_check_under("cuda:gloo")
    assert result["device"] == "cuda:0" and not result["ok"]
    assert "No backend type associated with device type cpu" not in result["error"]
    assert "cuda" in result["error"].lower() or "nvidia" in result["error"].lower(), result["error"]


def test_a_gpu_the_process_cannot_use_is_not_counted(tmp_path):
    (tmp_path / "dev").mkdir()
    assert not placement.nvidia_gpus_visible({}, tmp_path)
    (tmp_path / "dev" / "nvidia0").touch()
    assert placement.nvidia_gpus_visible({}, tmp_path)
    assert not placement.nvidia_gpus_visible({"CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert not placement.nvidia_gpus_visible({"CUDA_VISIBLE_DEVICES": "-1"}, tmp_path)
    assert placement.nvidia_gpus_visible({"CUDA_VISIBLE_DEVICES": "GPU-1234"}, tmp_path)


def test_shared_gpu_ranks_name_themselves_hosts_for_nccl_only_when_asked():
    from bench.torch_device import name_rank_a_host_for_nccl

    env: dict = {}
    name_rank_a_host_for_nccl(1, env)
    assert env == {}
    env = {placement.SHARED_GPU_ENV: "1"}
    name_rank_a_host_for_nccl(0, env)
    other = {placement.SHARED_GPU_ENV: "1"}
    name_rank_a_host_for_nccl(1, other)
    assert env["NCCL_HOSTID"] != other["NCCL_HOSTID"]
