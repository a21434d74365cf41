import dataclasses
from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.launchers import local_command
from launch.runspec import RunSpec


def test_horovod_mpi_runs_under_mpirun_and_exports_its_env():
    cmd = local_command(RunSpec(engine="horovod", ranks=2), Path("/r"), python="/py")
    assert Path(cmd.argv[0]).name == "mpirun" and cmd.argv[1:3] == ["-np", "2"]
    exported = {cmd.argv[i + 1] for i, a in enumerate(cmd.argv) if a == "-x"}
    assert set(cmd.env) <= exported
    program = cmd.argv[cmd.argv.index("/py"):]
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


@pytest.mark.parametrize("field, value", [
    ("engine", "nccl"), ("model", "resnet9000"), ("ranks", 0), ("batch_size", 0),
    ("precision", "fp8"), ("controller", "ssh"), ("framework", "jax"), ("image_size", 16),
])
def test_bad_specs_are_usage_errors(field, value):
    with pytest.raises(UsageError):
        RunSpec(**{field: value}).validated()


@pytest.mark.parametrize("allreduce, gpus, nccl", [("nccl", 0, True), ("nccl", 4, True), (None, 4, True),
                                                   (None, 0, False), ("gloo", 4, False), ("mpi", 4, False)])
def test_one_rule_says_whether_a_run_uses_nccl_and_every_preset_follows_it(allreduce, gpus, nccl):
    from launch.emulate import fabric_env
    from launch.fabric_preset import resolve
    from launch.site import FabricSite, Site

    spec = RunSpec(fabric="ethernet", allreduce=allreduce, gpus_per_node=gpus, ranks=max(1, gpus),
                   launcher="mpirun", runtime="host")
    assert spec.uses_nccl is nccl
    assert ("NCCL_SOCKET_IFNAME" in resolve(spec, Site(fabrics={"ethernet": FabricSite(interface="eth0")})).env) is nccl
    emulated = dataclasses.replace(spec, fabric="emu-eth-1g", launcher="emulated", link_rate="1gbit")
    assert ("NCCL_SOCKET_IFNAME" in fabric_env(emulated)) is nccl
