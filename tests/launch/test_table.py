"""Training and points tables: efficiency from the aggregated baseline, no comm share on one rank."""
import io

from rich.console import Console

from launch.results import aggregate
from launch.results.table import points_table, training_table
from tests.results import train_result


def text(table) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    return out.getvalue()


RESULTS = [train_result("a1", img=50.0, ranks=1, comm=None, samples=[50.0, 50.0], params_max_abs_diff=0.0),
           train_result("a2", img=80.0, ranks=2, comm=0.4, samples=[80.0, 80.0], params_max_abs_diff=0.0),
           train_result("a3", img=None, ranks=2, status="failed", reason="rank 1 died")]


def test_training_table_rows():
    rows = [line for line in text(training_table(RESULTS)).splitlines() if "resnet18" in line]
    one, two, failed = rows
    assert "50.0" in one and "1.00" in one and "%" not in one          # efficiency 1, no comm share
    assert "80.0" in two and "40.0" in two and "0.80" in two and "40%" in two
    assert "failed" in failed and "rank 1 died" in failed


def test_points_table_names_each_baseline():
    points = aggregate.aggregate(RESULTS)
    out = text(points_table(points, "t"))
    two = next(line for line in out.splitlines() if " 2 " in line and "80.0" in line)
    assert "0.80" in two and "ethernet/ddp/resnet18" in two.split("│")[-2]
    assert "itself" in next(line for line in out.splitlines() if "50.0" in line)
