import json
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
            {"engine": "horovod", "allreduce": "gloo", "gpus_per_node": 4, "controller": "mpi"},
            "--allreduce gloo with Horovod on GPUs is refused: no Horovod build has gloo GPU operations",
        ),
        ({"allreduce": "nccl", "gpus_per_node": 0, "launcher": "local"}, "--allreduce nccl needs GPUs"),
    ],
)
def test_runs_that_would_measure_something_else_on_gpus_are_refused(changes, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        RunSpec(**{"ranks": 4, "launcher": "mpirun", **changes}).validated()


def test_horovod_with_mpi_stays_possible_on_cpus():
    spec = RunSpec(engine="horovod", allreduce="mpi", gpus_per_node=0, ranks=2, launcher="mpirun").validated()
    assert spec.allreduce == "mpi" and not spec.hands_gpu_buffers_to_mpi
    assert RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=1, ranks=2, launcher="mpirun").validated()


def test_mpi_on_gpu_buffers_on_the_host_is_refused_by_preflight_in_one_line_exit_2(tmp_path):
    """A spec may ask for MPI on GPU buffers (the image decides: launch.site.preflight); on the host
    no image says its MPI is CUDA-aware, so the run stops before anything starts."""
    spec = RunSpec(engine="horovod", allreduce="mpi", gpus_per_node=1, ranks=1, launcher="mpirun").validated()
    assert spec.hands_gpu_buffers_to_mpi
    proc = fabric_bench(
        "run", "--engine", "horovod", "--allreduce", "mpi", "--gpus-per-node", "1", "--ranks", "1",
        "--results", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "--allreduce mpi with horovod on GPUs: a run on the host" in line and "mpi-cuda" in line
    assert not list(tmp_path.iterdir())  # nothing ran


def dry_run_env(site: Path, tmp_path: Path, *args: str) -> tuple[dict[str, str], list[str]]:
    """A GPU run's dry run on a GPU site: the ranks' environment it prints, and its other lines."""
    proc = fabric_bench(
        "run", "--gpus-per-node", "2", "--ranks", "4", "--nodes", "2", "--site", str(site),
        "--results", str(tmp_path / "results"), "--dry-run", *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (env,) = [json.loads(line.removeprefix("env: ")) for line in lines if line.startswith("env: ")]
    return env, lines


@pytest.mark.parametrize(
    "fabric, gpudirect, ucx",
    [
        ("ethernet", "on", {"UCX_TLS": "tcp,sm,self,cuda_copy,cuda_ipc,gdr_copy", "OMPI_MCA_pml": "ucx"}),
        ("ethernet", "off", {"UCX_TLS": "tcp,sm,self,cuda_copy", "OMPI_MCA_pml": "ucx"}),
        ("infiniband", "on", {"UCX_TLS": "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy", "UCX_IB_GPU_DIRECT_RDMA": "yes"}),
        ("infiniband", "off", {"UCX_TLS": "rc,ud,sm,self,cuda_copy", "UCX_IB_GPU_DIRECT_RDMA": "no"}),
    ],
)
def test_the_dry_run_of_an_mpi_on_gpu_point_shows_horovod_s_mpi_build_and_ucx_s_gpu_transports(
    gpu_site, tmp_path, fabric, gpudirect, ucx
):
    from containers import stack

    image = f"images/{fabric}-cuda.sif"
    common = ("--engine", "horovod", "--image", image, "--fabric", fabric, "--gpudirect", gpudirect)
    env, lines = dry_run_env(gpu_site, tmp_path, *common, "--allreduce", "mpi")
    assert env["PYTHONPATH"] == stack.HOROVOD_MPI_GPU_DIR and env["HOROVOD_CPU_OPERATIONS"] == "mpi"
    assert {name: env.get(name) for name in ucx} == ucx
    (argv,) = [json.loads(line.removeprefix("argv: ")) for line in lines if line.startswith("argv: ")]
    assert f"PYTHONPATH={stack.HOROVOD_MPI_GPU_DIR}" in argv  # set inside the image, in front of the program
    (skipped,) = [line for line in lines if line.startswith("preflight skipped: ")]
    assert f"image {image} labelled org.fabric-bench.mpi-cuda" in skipped and "horovod-mpi-gpu" in skipped
    # the same point's NCCL arm: the image's own Horovod and the fabric's host-buffer MPI path
    env, _ = dry_run_env(gpu_site, tmp_path, *common, "--allreduce", "nccl")
    assert "PYTHONPATH" not in env and "HOROVOD_CPU_OPERATIONS" not in env
    assert env.get("UCX_IB_GPU_DIRECT_RDMA") != "yes"
    assert env["OMPI_MCA_pml"] == ("ob1" if fabric == "ethernet" else "ucx")
