"""A locate.json may come from another site (or another user): `sweep --exclude-located` puts
its node names into `srun --exclude` and `#SBATCH --exclude`, the report draws it. One that is
malformed, huge, nested 100k deep, not a file at all, or names a node of the wrong shape
(`-x`, `..`) or one that is not in the cluster is refused in one line, exit 2, before anything
is written (issue 41)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launch.fleet import locate
from launch.errors import UsageError
from launch.fleet.node_names import interface_name, is_interface_name, is_node_name, node_name
from tests import slurm_cluster
from tests.conftest import REPO, fabric_bench, need

EXPERIMENT = str(REPO / "experiments" / "cpu-small.experiment.toml")


def located(path: Path, body) -> Path:
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return path


def sweep_excluding(path: Path, tmp_path: Path, **kwargs):
    return fabric_bench(
        "sweep",
        EXPERIMENT,
        "--launcher",
        "srun",
        "--exclude-located",
        str(path),
        "--dry-run",
        "--dir",
        str(tmp_path / "sweep"),
        **kwargs,
    )


@pytest.mark.parametrize(
    "name, ok",
    [
        ("n0", True),
        ("gpu-a100-017.cluster.example.org", True),
        ("node_7", True),
        ("-x", False),
        ("--nodelist=n9", False),
        ("..", False),
        (".hidden", False),
        ("n1/../../etc", False),
        ("n1 n2", False),
        ("n1,n2", False),
        ("n[1-4]", False),
        ("n1;reboot", False),
        ("", False),
        ("x" * 254, False),
        ("nœud", False),
        (7, False),
    ],
)
def test_a_node_name_is_one_token_that_no_tool_reads_as_an_option_or_a_path(name, ok):
    assert is_node_name(name) is ok
    if not ok:
        with pytest.raises(UsageError, match="is not a node name"):
            node_name(name, "f.json")


def test_an_interface_name_has_the_kernel_s_shape():
    assert all(is_interface_name(n) for n in ("eth0", "fbemu0", "ib0", "enp65s0f0np0", "eth0:1", "bond0.100"))
    for bad in ("-eth0", "eth0 up", "../x", "x" * 16, "eth0,lo", "^lo", ""):
        assert not is_interface_name(bad)
    with pytest.raises(UsageError, match="is not a network interface name"):
        interface_name("-v", "--interface")


@pytest.mark.parametrize(
    "body, line",
    [
        ({"kind": "locate", "slow_nodes": ["-x"]}, "not a locate result"),
        ({"kind": "locate", "slow_nodes": ["--exclude=n0"]}, "not a locate result"),
        ({"kind": "locate", "slow_nodes": ["../../etc/passwd"]}, "not a locate result"),
        ({"kind": "locate", "slow_nodes": "n1"}, "not a locate result"),
        ({"kind": "locate", "slow_nodes": [["n1"]]}, "not a locate result"),
        ("[" * 100_000 + "]" * 100_000, "not a locate result: nested more than 64 levels deep"),
        ('{"kind": "locate", ', "not a locate result: not JSON"),
    ],
)
def test_sweep_refuses_a_hostile_locate_result_before_anything_is_written(tmp_path, body, line):
    proc = sweep_excluding(located(tmp_path / "locate.json", body), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert line in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_locate_result_that_is_no_file_or_too_large_is_refused_at_once(tmp_path, kind):
    path = tmp_path / "locate.json"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a plain read would wait for ever
    elif kind == "device":
        path.symlink_to("/dev/zero")  # a plain read would fill memory for ever
    else:
        with path.open("wb") as f:
            f.truncate(locate.MAX_LOCATE_BYTES + 1)
    proc = sweep_excluding(path, tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert ("larger than 64 MiB" if kind == "huge" else "not a regular file") in proc.stderr, proc.stderr


def test_the_report_skips_a_hostile_locate_result_in_one_line_and_builds_the_rest(tmp_path):
    results = tmp_path / "results"
    for name, body in (
        ("fifo", None),
        ("dash", {"kind": "locate", "slow_nodes": ["-n1"], "nodes": ["-n1"]}),
        (
            "stranger",
            {
                "kind": "locate",
                "nodes": ["n0", "n1"],
                "slow_nodes": ["n7"],
                "pattern": "screen",
                "pairs": [{"a": "n0", "b": "n1", "best_gbit_s": 1.0}],
                "slow_links": [],
                "test": {"reference_gbit_s": 1.0},
            },
        ),
    ):
        (results / name).mkdir(parents=True)
        if body is None:
            os.mkfifo(results / name / "locate.json")
        else:
            located(results / name / "locate.json", body)
    proc = fabric_bench("report", str(results), "--output", str(tmp_path / "report"), timeout=300)
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("fabric-bench: skipped:")]
    assert len(skipped) == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert "'-n1'" in skipped[0] and "not a regular file" in skipped[1]  # in the order of their paths
    assert "it names 'n7', which is not one of its nodes" in skipped[2]


def test_a_link_or_node_named_outside_the_file_s_own_nodes_is_refused(tmp_path):
    body = {
        "kind": "locate",
        "nodes": ["n0", "n1"],
        "slow_nodes": [],
        "slow_links": [["n0", "n9"]],
        "pairs": [],
        "test": {"reference_gbit_s": 1.0},
    }
    with pytest.raises(UsageError, match="it names 'n9', which is not one of its nodes"):
        locate.read_locate(located(tmp_path / "locate.json", body))


@pytest.mark.slow
def test_sweep_refuses_nodes_the_cluster_does_not_have(tmp_path):
    """With a real Slurm cluster (slurmctld + slurmd on this host): a locate.json naming a node
    the cluster lacks is refused; one naming its node is taken."""
    need(slurm_cluster.available(), "Slurm is not installed (apt-get install slurm-wlm; make setup-test)")
    with slurm_cluster.SlurmCluster(tmp_path / "slurm") as cluster:
        stranger = located(tmp_path / "stranger.json", {"kind": "locate", "slow_nodes": ["n9", cluster.host]})
        proc = sweep_excluding(stranger, tmp_path, env=cluster.env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "names node 'n9', which is not in this cluster" in proc.stderr
        own = located(tmp_path / "own.json", {"kind": "locate", "slow_nodes": [cluster.host]})
        assert locate.named_nodes(own, [cluster.host]) == [cluster.host]
        # its own node is a name it takes: left out, so a one-node cluster has none left for the sweep
        taken = sweep_excluding(own, tmp_path, env=cluster.env)
        assert taken.returncode == 2 and taken.stderr.count("\n") == 1, taken.stderr
        assert f"leaves out {cluster.host} (slow node" in taken.stderr and "0 left" in taken.stderr
        assert "not in this cluster" not in taken.stderr


def test_an_interface_name_that_a_tool_would_read_as_an_option_is_refused_before_any_allocation(tmp_path):
    proc = fabric_bench("locate", "--interface", "-oops", "--out", str(tmp_path / "located"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--interface: '-oops' is not a network interface name" in proc.stderr
    assert not (tmp_path / "located").exists()
    site = tmp_path / "site.toml"
    site.write_text('[fabrics.ethernet]\ninterface = "-oops"\n')
    from launch.site.config import load_site

    with pytest.raises(UsageError, match=r"\[fabrics.ethernet\].interface"):
        load_site(site)


def test_a_slow_link_s_ends_must_be_nodes_of_this_cluster(tmp_path):
    """A link-only locate.json from elsewhere: its ends are checked like slow nodes are."""
    path = tmp_path / "locate.json"
    path.write_text(json.dumps({"kind": "locate", "slow_nodes": [], "slow_links": [["n1", "n9"]], "pairs": []}))
    with pytest.raises(UsageError, match="names node 'n9', which is not in this cluster"):
        locate.named(path, ["n0", "n1", "n2", "n3"])
    assert locate.named(path, ["n1", "n9"]).slow_links == [("n1", "n9")]
