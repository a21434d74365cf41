"""The report says what `make bench` says (issue 55): where ranks share one host's cores its plots draw
the 1-rank total beside the N x ideal and the same-cores efficiency beside the per-rank one, its
points table gives the same-cores efficiency beside the per-rank one, and a mean from one run says
so, in the runs table and in the plots; ranks on several nodes get none of it."""

from __future__ import annotations

import pytest

from launch.analysis import aggregate
from launch.analysis.plots import ONE_RUN_NOTE, figure_data, plot_efficiency, plot_throughput
from launch.analysis.report_tables import points_table, runs_table
from tests.results import train_result


def sweep(nodes: int) -> list[aggregate.Point]:
    """The README's first sweep's shape: 1 and 2 ranks, one run each (on `nodes` nodes at 2 ranks)."""
    runs = [
        train_result("one", img=110.0, ranks=1, spec={"nodes": 1}),
        train_result("two", img=121.0, ranks=2, spec={"nodes": nodes}),
    ]
    return aggregate.aggregate(runs)


def test_ranks_sharing_cores_are_drawn_against_the_same_cores():
    curves = aggregate.curves(sweep(nodes=1))
    (name,) = curves
    throughput = figure_data(plot_throughput(curves))
    assert throughput["ideal"][0]["y"] == [110.0, 220.0]  # N x 1-rank, still drawn
    assert throughput["same_cores"] == [{"name": name, "x": [1.0, 2.0], "y": [110.0, 110.0]}]
    efficiency = figure_data(plot_efficiency(curves))
    assert efficiency["series"][0]["y"] == pytest.approx([1.0, 0.55])  # per rank: ~1/N by construction
    assert efficiency["same_cores"][0]["y"] == pytest.approx([1.0, 1.1])  # the same cores: 121 / 110
    assert throughput["notes"] == [ONE_RUN_NOTE] == efficiency["notes"]


def test_ranks_on_their_own_nodes_get_no_same_cores_line():
    curves = aggregate.curves(sweep(nodes=2))
    assert "same_cores" not in figure_data(plot_throughput(curves))
    assert "same_cores" not in figure_data(plot_efficiency(curves))


def test_the_tables_give_the_same_cores_efficiency_and_say_a_mean_is_one_run():
    points = sweep(nodes=1)
    header, rows = points_table(points)
    two = next(row for row in rows if row[1] == "2")
    assert two[header.index("scaling eff.")] == "0.55 (shared cores: 1.10 of the 1-rank total)"
    assert two[header.index("95% CI")].endswith("(1 run)")
    runs = [r for p in points for r in p.runs]
    header, rows = runs_table(runs, points)
    assert all(row[header.index("95% CI")].endswith("(1 run)") for row in rows), rows
    assert [p.describe()["same_cores_efficiency"] for p in points] == [None, pytest.approx(1.1)]
