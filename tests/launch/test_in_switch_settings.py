"""NVLS and SHARP as run settings and sweep axes (--nvls, --sharp: NCCL_NVLS_ENABLE,
NCCL_COLLNET_ENABLE), and what every GPU result records of them (transport.in_switch), read from
the recorded real NCCL logs in tests/data/nccl (SOURCE.md in each folder). Issue 49, item 6."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from containers.files import sha256_bytes
from launch.errors import UsageError
from launch.ranks.launchers import Plan, rank_env
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import HostRuntime
from launch.results import transport
from launch.plan.experiment import Point

RECORDED = Path(__file__).resolve().parents[1] / "data" / "nccl"


def gpu_spec(**more) -> RunSpec:
    return RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=1, ranks=1, **more).validated()


@pytest.mark.parametrize(
    "settings, env",
    [
        ({}, {}),
        ({"nvls": "on"}, {"NCCL_NVLS_ENABLE": "1"}),
        ({"nvls": "off", "sharp": "on"}, {"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "1"}),
    ],
)
def test_the_settings_reach_every_rank_as_ncc_variables(tmp_path, settings, env):
    ranks = rank_env(gpu_spec(**settings), Plan(record_dir=tmp_path, runtime=HostRuntime()))
    assert {k: v for k, v in ranks.items() if k in ("NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE")} == env


def test_the_run_s_own_environment_still_wins(tmp_path):
    spec = gpu_spec(nvls="on", extra_env={"NCCL_NVLS_ENABLE": "0"})
    assert rank_env(spec, Plan(record_dir=tmp_path, runtime=HostRuntime()))["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("name", ["nvls", "sharp"])
def test_on_needs_gpus_and_nccl_and_only_on_or_off_is_taken(name):
    with pytest.raises(UsageError, match=f"--{name} on is NCCL's"):
        RunSpec(benchmark="allreduce", ranks=1, **{name: "on"}).validated()
    with pytest.raises(UsageError, match=f"--{name} must be on or off"):
        gpu_spec(**{name: "yes"})
    assert gpu_spec(**{name: "off"}).in_switch_env()


def test_a_point_s_key_is_unchanged_where_the_settings_are_left_at_their_default():
    spec = RunSpec(ranks=1)
    later = ("nvls", "sharp", "max_seconds_per_size")  # fields added after sweeps recorded keys
    old = {k: v for k, v in spec.as_dict().items() if k not in ("time_limit", "exclude_nodes", *later)}
    expected = sha256_bytes(json.dumps({"spec": old, "repetition": 0}, sort_keys=True).encode())[:12]
    assert Point(spec).key == expected
    assert Point(gpu_spec(nvls="on")).key != Point(gpu_spec()).key


def gpu_result(log: str, hosts: int, world: int, **spec) -> tuple[dict, str]:
    return (
        {
            "spec": {"gpus_per_node": 8, "nodes": hosts, **spec},
            "hosts": [f"n{i}" for i in range(hosts)],
            "world_size": world,
            "env": {},
        },
        (RECORDED / log / "nccl_info.log").read_text(),
    )


def evidence(tmp_path: Path, result: dict, text: str) -> dict:
    log = tmp_path / "output.log"
    log.write_text(text)
    return transport.evidence(result, log)


def test_every_gpu_result_records_what_nccl_set_up(tmp_path):
    result, log = gpu_result("nvls-tree-two-nodes", 2, 16, nvls="on")
    found = evidence(tmp_path, result, log)
    assert found["in_switch"]["nvls"] == {
        "asked": "on",
        "NCCL_NVLS_ENABLE": None,
        "set_up": ["NVLSTree"],
        "possible": True,
    }
    assert found["in_switch"]["sharp"]["asked"] == "default" and found["in_switch"]["sharp"]["set_up"] == []
    assert found["verdict"] != "mismatch"
    # a CPU run has no in-switch record
    cpu = evidence(tmp_path, {"spec": {"gpus_per_node": 0}, "env": {}}, log)
    assert cpu["in_switch"] is None


def test_sharp_asked_on_and_not_set_up_is_a_mismatch(tmp_path):
    # NVIDIA/nccl#1219: the SHARP group failed, CollNet was freed: asked on, ran without it
    result, log = gpu_result("collnet-sharp-group-failed", 2, 8, sharp="on")
    found = evidence(tmp_path, result, log)
    assert found["in_switch"]["sharp"]["set_up"] == [] and found["verdict"] == "mismatch"
    assert "nccl.sharp: asked on, NCCL's log shows it not set up" in found["mismatches"]
    # one node: CollNet is not possible there, so not set up is no mismatch
    one, _ = gpu_result("collnet-sharp-group-failed", 1, 8, sharp="on")
    single = evidence(tmp_path, one, log)
    assert single["in_switch"]["sharp"]["possible"] is False and "nccl.sharp" not in " ".join(single["mismatches"])


def test_nvls_and_sharp_are_sweep_axes_and_a_cpu_point_drops_on(tmp_path):
    from launch.plan.experiment import expand, load_experiment

    path = tmp_path / "exp.toml"
    path.write_text(
        '[experiment]\nname = "in-switch"\n[matrix]\nnvls = ["on", "off"]\nsharp = ["on", "off"]\n'
        'gpus_per_node = [0, 4]\n[run]\nbenchmark = "allreduce"\nbackend = "torch"\nnodes = 2\n'
        'ranks_per_node = 4\nlauncher = "srun"\n'
    )
    runs = [p for p in expand(load_experiment(path)) if not p.baseline]
    settings = {(p.spec.gpus_per_node, p.spec.nvls, p.spec.sharp) for p in runs}
    assert settings == {(4, "on", "on"), (4, "on", "off"), (4, "off", "on"), (4, "off", "off"), (0, "off", "off")}
    # each point's label names its settings, so the four GPU points' labels differ
    gpu = [p for p in runs if p.spec.gpus_per_node]
    assert len({p.label for p in gpu}) == 4 and all(f"nvls{p.spec.nvls}-sharp{p.spec.sharp}" in p.label for p in gpu)
    # the 1-rank baselines reduce nothing in a switch: the settings are left at NCCL's default
    assert {(b.spec.nvls, b.spec.sharp) for b in expand(load_experiment(path)) if b.baseline} == {(None, None)}
