"""The site's own NCCL files reach a containerised run (issue 49, item 5): the host's
/etc/nccl.conf bound read-only where present, and the site file's [env] NCCL_TOPO_FILE taken as
the site's own trusted input and bound; the same variable from an experiment file stays refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import trust
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import Bind
from launch.site.config import Site
from launch.site.fabric_preset import nccl_host_files, resolve

TOPO = "/opt/site/nccl-topo.xml"


def nccl_run(launcher: str = "local") -> RunSpec:
    return RunSpec(benchmark="allreduce", backend="torch", gpus_per_node=1, ranks=1, launcher=launcher).validated()


def host(root: Path, conf: bool, topo: bool) -> Path:
    if conf:
        (root / "etc").mkdir(parents=True)
        (root / "etc/nccl.conf").write_text("NCCL_SOCKET_IFNAME=ib0\n")
    if topo:
        (root / "opt/site").mkdir(parents=True)
        (root / TOPO.lstrip("/")).write_text("<system version='1'/>\n")
    return root


def test_the_host_nccl_conf_and_the_site_topology_file_are_bound_read_only(tmp_path):
    binds, missing = nccl_host_files(nccl_run(), Site(env={"NCCL_TOPO_FILE": TOPO}), host(tmp_path, True, True))
    assert binds == [Bind("/etc/nccl.conf", "/etc/nccl.conf", True), Bind(TOPO, TOPO, True)] and missing == []


def test_nothing_is_bound_where_nothing_is_there_or_the_run_has_no_nccl(tmp_path):
    root = host(tmp_path, False, False)
    assert nccl_host_files(nccl_run(), Site(), root) == ([], [])
    cpu = RunSpec(benchmark="allreduce", ranks=1).validated()
    assert nccl_host_files(cpu, Site(env={"NCCL_TOPO_FILE": TOPO}), host(tmp_path / "b", True, True)) == ([], [])


def test_a_site_topology_file_absent_where_the_ranks_run_is_missing_not_on_a_login_node(tmp_path):
    site, root = Site(env={"NCCL_TOPO_FILE": TOPO}), host(tmp_path, False, False)
    assert nccl_host_files(nccl_run("local"), site, root) == (
        [],
        [f"{TOPO}: the site's NCCL topology file ([env] NCCL_TOPO_FILE)"],
    )
    assert nccl_host_files(nccl_run("srun"), site, root) == ([], [])  # the compute nodes may hold it
    with pytest.raises(UsageError, match="absolute path"):
        nccl_host_files(nccl_run(), Site(env={"NCCL_TOPO_FILE": "topo.xml"}), root)


def test_the_preset_carries_them_and_an_experiment_s_topology_file_stays_foreign():
    preset = resolve(nccl_run(), Site(env={"NCCL_TOPO_FILE": TOPO}))
    assert preset.env["NCCL_TOPO_FILE"] == TOPO and preset.missing == (
        f"{TOPO}: the site's NCCL topology file ([env] NCCL_TOPO_FILE)",
    )
    with pytest.raises(UsageError, match="NCCL_TOPO_FILE"):
        trust.check_foreign_env({"NCCL_TOPO_FILE": TOPO})


def test_charliecloud_which_binds_only_onto_existing_paths_gets_none(tmp_path):
    spec = RunSpec(
        benchmark="allreduce", backend="torch", gpus_per_node=1, ranks=1, runtime="charliecloud", image="/img/dir"
    ).validated()
    assert nccl_host_files(spec, Site(env={"NCCL_TOPO_FILE": TOPO}), host(tmp_path, True, True)) == ([], [])


def test_a_site_topology_file_missing_here_stops_a_local_run_in_one_line(tmp_path):
    from tests.conftest import fabric_bench

    site = tmp_path / "site.toml"
    site.write_text(f'[env]\nNCCL_TOPO_FILE = "{tmp_path}/absent-topo.xml"\n')
    results = tmp_path / "results"
    args = ["run", "--site", str(site), "--benchmark", "allreduce", "--backend", "torch", "--gpus-per-node", "1"]
    real = fabric_bench(*args, "--ranks", "1", "--results", str(results))
    assert real.returncode == 2 and real.stderr.count("\n") == 1, real.stderr
    assert "the run needs" in real.stderr and "absent-topo.xml" in real.stderr
    assert not results.exists()
