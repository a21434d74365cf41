"""Open MPI collective rules: the file Open MPI reads, and which runs get one."""

from pathlib import Path

import pytest

from containers import ompi_rules
from containers.fabrics import ETHERNET
from containers.ompi_rules import Rule, render
from launch.runs.run import make_plan
from launch.ranks.runspec import RunSpec
from launch.site.config import FabricSite, Site

SITE = Site(
    fabrics={"ethernet": FabricSite(interface="eth0"), "infiniband": FabricSite(interface="ib0", device="mlx5_0")}
)
RUN_DIR = Path("/results/RUN")


def numbers(text: str) -> list[list[int]]:
    """The file as Open MPI's parser sees it: integers, comments dropped."""
    return [[int(x) for x in line.split("#")[0].split()] for line in text.splitlines()]


def test_ethernet_rules_file_is_fixed_below_16_mib_and_segmented_ring_from_there():
    assert numbers(render(ETHERNET.ompi_coll_rules)) == [
        [1],  # one collective
        [2],
        [1],  # allreduce; one communicator size
        [2],
        [2],  # from 2 ranks on; two message sizes
        [0, 0, 0, 0],  # below: Open MPI's fixed decision
        [16 << 20, 5, 0, 256 << 10],  # 16 MiB on: segmented ring, 256 KiB segments
    ]


def test_rules_group_by_communicator_size_and_start_at_the_first_rule():
    text = render(
        (
            Rule("allreduce", 1 << 20, "ring", min_ranks=8),
            Rule("allreduce", 0, "recursive_doubling"),
            Rule("allreduce", 4 << 20, "rabenseifner", min_ranks=8),
        )
    )
    assert numbers(text) == [
        [1],
        [2],
        [2],
        [2],
        [1],
        [0, 3, 0, 0],
        [8],
        [3],
        [0, 0, 0, 0],
        [1 << 20, 4, 0, 0],
        [4 << 20, 6, 0, 0],
    ]


def test_an_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="no Open MPI allreduce algorithm 'tree'"):
        Rule("allreduce", 0, "tree")


def plan_of(**fields):
    plan, _ = make_plan(RunSpec(**fields).validated(), RUN_DIR, SITE)
    return plan


@pytest.mark.parametrize(
    "fields",
    [
        dict(launcher="mpirun", nodes=2, ranks=2, fabric="ethernet"),
        dict(launcher="emulated", nodes=2, ranks=2, link_rate="1gbit"),
        dict(launcher="emulated", nodes=2, ranks=2, fabric="emu-eth-1g"),
    ],
)
def test_ethernet_runs_read_the_rules_from_their_own_directory(fields):
    plan = plan_of(**fields)
    path = RUN_DIR / ompi_rules.FILE_NAME
    assert plan.run_files == {path: render(ETHERNET.ompi_coll_rules)}
    assert plan.fabric_env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] == str(path)
    assert plan.fabric_env["OMPI_MCA_coll_tuned_use_dynamic_rules"] == "1"


@pytest.mark.parametrize(
    "fields",
    [
        dict(launcher="mpirun", nodes=2, ranks=2, fabric="infiniband"),  # no rules measured there
        dict(launcher="mpirun", nodes=2, ranks=2),  # no fabric: Open MPI as it is
        # the user steers coll/tuned: a rules file would override a forced algorithm
        dict(
            launcher="emulated",
            nodes=2,
            ranks=2,
            link_rate="1gbit",
            extra_env={"OMPI_MCA_coll_tuned_allreduce_algorithm": "4"},
        ),
    ],
)
def test_other_runs_get_no_rules(fields):
    plan = plan_of(**fields)
    assert plan.run_files == {}
    assert "OMPI_MCA_coll_tuned_dynamic_rules_filename" not in plan.fabric_env
