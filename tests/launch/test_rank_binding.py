"""Ranks bound per launcher (issue 49, item 5): a CPU run's mpirun places each rank on a block
of cores in order (PE=k, --bind-to core) instead of --bind-to none, and srun binds tasks to cores in
blocks (--cpu-bind=cores, --distribution=block:block); a GPU run's ranks get their allocation's CPUs
and narrow themselves to their GPU's (bench.placement.pin_near_gpu, tested in
tests/bench/test_pin_near_gpu.py). More ranks than cores on one host, and emulated nodes, stay
unbound. Checked against the real mpirun where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from launch.ranks.launchers import Plan, cores_here, mpirun_binding, srun_argv
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import HostRuntime


def spec(ranks: int, nodes: int = 1, launcher: str = "mpirun", **more) -> RunSpec:
    return RunSpec(benchmark="allreduce", ranks=ranks, nodes=nodes, launcher=launcher, **more).validated()


@pytest.mark.parametrize(
    "ranks, nodes, cores, expected",
    [
        (16, 2, 64, ["--map-by", "ppr:8:node:PE=8", "--bind-to", "core"]),  # 8 ranks on 2 x 32 cores
        (2, 1, 2, ["--map-by", "ppr:2:node:PE=1", "--bind-to", "core"]),  # this machine's CPU run
        (3, 1, 2, ["--map-by", "ppr:3:node", "--bind-to", "none"]),  # oversubscribed: binding would refuse
    ],
)
def test_mpirun_binds_each_rank_to_a_block_of_cores(ranks, nodes, cores, expected):
    assert mpirun_binding(spec(ranks, nodes), cores) == expected


def test_emulated_nodes_and_gpu_ranks_are_not_bound_by_mpirun():
    assert mpirun_binding(spec(4, 2, "emulated"), 2)[-1] == "none"
    assert mpirun_binding(spec(16, 2, gpus_per_node=8, backend="torch"), 64)[-1] == "none"


def test_srun_binds_cpu_tasks_to_cores_in_blocks(tmp_path):
    argv = srun_argv(spec(8, 2, "srun"), Plan(tmp_path / "r", HostRuntime()), {})
    assert "--cpu-bind=cores" in argv and "--distribution=block:block" in argv


def test_srun_leaves_gpu_tasks_their_allocation_and_every_gpu_visible(tmp_path):
    argv = srun_argv(spec(8, 2, "srun", gpus_per_node=4, backend="torch"), Plan(tmp_path / "r", HostRuntime()), {})
    assert "--cpu-bind=none" in argv and "--cpu-bind=cores" not in argv
    assert "--gpus-per-node=4" in argv and not any(a.startswith(("--gpus-per-task", "--gpu-bind")) for a in argv)


def test_cores_count_physical_cores_not_hardware_threads(tmp_path):
    (tmp_path / "cpu0/topology").mkdir(parents=True)
    (tmp_path / "cpu0/topology/thread_siblings_list").write_text("0,64\n")
    assert cores_here(tmp_path) == max(1, cores_here(Path("/nonexistent")) // 2)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun here")
def test_the_real_mpirun_binds_two_ranks_to_two_cores():
    run = spec(2)
    if run.ranks_per_node > cores_here():
        pytest.skip("fewer than 2 cores here")
    argv = ["mpirun", "--allow-run-as-root", "-np", "2", *mpirun_binding(run), "--report-bindings", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    bound = re.findall(r"MCW rank (\d) bound to (.*)", done.stderr + done.stdout)
    assert sorted(rank for rank, _ in bound) == ["0", "1"] and len({where for _, where in bound}) == 2
