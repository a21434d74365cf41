import re
import dataclasses
from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.ranks.launchers import local_command
from launch.ranks.runspec import RunSpec
from tests.conftest import fabric_bench


def test_horovod_mpi_runs_under_mpirun_and_exports_its_env():
    cmd = local_command(RunSpec(engine="horovod", ranks=2), Path("/r"), python="/py")
    assert Path(cmd.argv[0]).name == "mpirun" and cmd.argv[1:3] == ["-np", "2"]
    exported = {cmd.argv[i + 1] for i, a in enumerate(cmd.argv) if a == "-x"}
    assert set(cmd.env) <= exported
    program = cmd.argv[cmd.argv.index("/py") :]
    assert program[:3] == ["/py", "-m", "bench.torch_train"]
    assert program[-2:] == ["--record-dir", "/r"]


def test_horovod_gloo_uses_horovodrun_and_ddp_uses_torchrun():
    gloo = local_command(RunSpec(engine="horovod", controller="gloo", ranks=3), Path("/r"))
    assert Path(gloo.argv[0]).name == "horovodrun" and "--gloo" in gloo.argv and "localhost:3" in gloo.argv
    ddp = local_command(RunSpec(engine="ddp", ranks=4, bucket_cap_mb=50), Path("/r"))
    assert Path(ddp.argv[0]).name == "torchrun"
    assert ddp.argv[ddp.argv.index("--nproc-per-node") + 1] == "4"
    assert ddp.argv[ddp.argv.index("--bucket-cap-mb") + 1] == "50"
    assert ddp.argv[ddp.argv.index("--log-dir") + 1] == "/r/torchrun"  # not a /tmp/torchelastic_* left behind


def test_user_env_overrides_defaults_and_values_stay_single_arguments():
    spec = RunSpec(engine="ddp", extra_env={"OMP_NUM_THREADS": "7", "X": "a b; rm -rf /"})
    cmd = local_command(spec, Path("/r"))
    assert cmd.env["OMP_NUM_THREADS"] == "7"
    assert "X='a b; rm -rf /'" in cmd.render()


@pytest.mark.parametrize(
    "field, value",
    [
        ("engine", "nccl"),
        ("model", "resnet9000"),
        ("ranks", 0),
        ("batch_size", 0),
        ("precision", "fp8"),
        ("controller", "ssh"),
        ("framework", "jax"),
        ("image_size", 16),
    ],
)
def test_bad_specs_are_usage_errors(field, value):
    with pytest.raises(UsageError):
        RunSpec(**{field: value}).validated()


@pytest.mark.parametrize(
    "allreduce, gpus, nccl",
    [("nccl", 0, True), ("nccl", 4, True), (None, 4, True), (None, 0, False), ("gloo", 4, False), ("mpi", 4, False)],
)
def test_one_rule_says_whether_a_run_uses_nccl_and_every_preset_follows_it(allreduce, gpus, nccl):
    from launch.ranks.emulated import fabric_env
    from launch.site.fabric_preset import resolve
    from launch.site.config import FabricSite, Site

    spec = RunSpec(
        fabric="ethernet",
        allreduce=allreduce,
        gpus_per_node=gpus,
        ranks=max(1, gpus),
        launcher="mpirun",
        runtime="host",
    )
    assert spec.uses_nccl is nccl
    assert ("NCCL_SOCKET_IFNAME" in resolve(spec, Site(fabrics={"ethernet": FabricSite(interface="eth0")})).env) is nccl
    emulated = dataclasses.replace(spec, fabric="emu-eth-1g", launcher="emulated", link_rate="1gbit")
    assert ("NCCL_SOCKET_IFNAME" in fabric_env(emulated)) is nccl


@pytest.mark.parametrize("gpus", [0, 4])
def test_every_rank_is_told_the_gpus_asked_for_and_a_cpu_run_hides_them(gpus, tmp_path):
    """Issue 42, item 4: gpus_per_node = 0 on a GPU host must not train on the GPU (and TF in the cuda
    image must not see Apptainer's /dev/nvidia*): CUDA_VISIBLE_DEVICES=-1 hides them; with GPUs it is
    left to the site, and the bench refuses a GPU run its framework cannot see (bench.gpu_request)."""
    from bench.gpu_request import GPUS_REQUESTED_ENV
    from launch.ranks.launchers import Plan, rank_env
    from launch.ranks.runtimes import HostRuntime

    spec = RunSpec(ranks=max(1, gpus), gpus_per_node=gpus, launcher="mpirun").validated()
    env = rank_env(spec, Plan(record_dir=tmp_path, runtime=HostRuntime()))
    assert env[GPUS_REQUESTED_ENV] == str(gpus)
    assert ("CUDA_VISIBLE_DEVICES" in env) is (gpus == 0) and env.get("CUDA_VISIBLE_DEVICES", "-1") == "-1"


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"engine": "horovod", "allreduce": "mpi", "gpus_per_node": 4},
            "--allreduce mpi with Horovod on GPUs is refused: the image's Horovod is built with HOROVOD_GPU_OPERATIONS=NCCL",
        ),
        (
            {"engine": "horovod", "allreduce": "gloo", "gpus_per_node": 4, "controller": "mpi"},
            "--allreduce gloo with Horovod on GPUs is refused",
        ),
        (
            {"benchmark": "allreduce", "backend": "mpi", "gpus_per_node": 1},
            "--backend mpi reduces host (numpy) buffers",
        ),
        ({"allreduce": "nccl", "gpus_per_node": 0, "launcher": "local"}, "--allreduce nccl needs GPUs"),
    ],
)
def test_runs_that_would_measure_something_else_on_gpus_are_refused(changes, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        RunSpec(**{"ranks": 4, "launcher": "mpirun", **changes}).validated()


def test_horovod_with_mpi_stays_possible_on_cpus():
    spec = RunSpec(engine="horovod", allreduce="mpi", gpus_per_node=0, ranks=2, launcher="mpirun").validated()
    assert spec.allreduce == "mpi"
    assert RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=1, ranks=2, launcher="mpirun").validated()


def test_the_horovod_mpi_refusal_is_one_line_exit_2_on_the_command_line(tmp_path):
    proc = fabric_bench(
        "run",
        "--engine",
        "horovod",
        "--allreduce",
        "mpi",
        "--gpus-per-node",
        "1",
        "--ranks",
        "1",
        "--results",
        str(tmp_path),
        "--dry-run",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in line and "NCCL would still move the GPU buffers" in line
