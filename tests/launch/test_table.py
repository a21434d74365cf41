"""Training and points tables: efficiency from the aggregated baseline, no comm share on one rank."""

import io
import re

from rich.console import Console

from launch.analysis import aggregate
from launch.analysis.table import points_table, training_table
from tests.results import train_result


def text(table) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    return out.getvalue()


RESULTS = [
    train_result("a1", img=50.0, ranks=1, comm=None, samples=[50.0, 50.0], params_max_abs_diff=0.0),
    train_result("a2", img=80.0, ranks=2, comm=0.4, samples=[80.0, 80.0], params_max_abs_diff=0.0),
    train_result("a3", img=None, ranks=2, status="failed", reason="rank 1 died"),
]


def test_training_table_rows():
    rows = [line for line in text(training_table(RESULTS)).splitlines() if "resnet18" in line]
    one, two, failed = rows
    assert "50.0" in one and "1.00" in one and "%" not in one  # efficiency 1, no comm share
    assert "80.0" in two and "40.0" in two and "0.80" in two and "40%" in two
    assert "failed" in failed and "rank 1 died" in failed


def test_points_table_names_each_baseline():
    points = aggregate.aggregate(RESULTS)
    out = text(points_table(points, "t"))
    two = next(line for line in out.splitlines() if " 2 " in line and "80.0" in line)
    assert "0.80" in two and "ethernet/ddp/resnet18" in two.split("│")[-2]
    assert "itself" in next(line for line in out.splitlines() if "50.0" in line)


def allreduce_run(run_id, busbw, ranks=2, samples_us=None, fabric="ethernet", nodes=2):
    from tests.results import allreduce_result

    row = {"bytes": 16 * 2**20, "busbw_gbit_s": busbw, "time_us": 1000.0}
    if samples_us is not None:
        row["samples_us"] = samples_us
    return allreduce_result(
        run_id,
        sizes=[row],
        ranks=ranks,
        fabric=fabric,
        engine="ddp",
        spec={"fabric": fabric, "nodes": nodes, "engine": "ddp"},
    )


def test_an_allreduce_series_is_named_by_its_backend_and_its_interval_reads_right():
    """An MPI allreduce series is ethernet/mpi/allreduce (not the engine default it never reads);
    one repetition's interval over its iterations says so and never rounds to ±0.0; one sample
    has no interval and says that."""
    from launch.analysis import verdict
    from launch.analysis.table import verdict_tables

    runs = [
        allreduce_run("one", 0.07, samples_us=[1000.0, 1010.0, 990.0]),
        allreduce_run("single", 0.05, samples_us=None, fabric="emu-eth-1g"),
    ]
    points = aggregate.aggregate(runs)
    shown = text(points_table(points, "points"))
    row = next(line for line in shown.splitlines() if "ethernet/mpi/allreduce" in line)
    assert "0.07 Gbit/s" in row and not re.search(r"±0\.0(?!\d)", row)
    ci = next(p for p in points if p.fabric == "ethernet").ci95
    assert f"±{ci:.2g} (1 run)" in row
    single = next(line for line in shown.splitlines() if "emu-eth-1g/mpi/allreduce" in line)
    assert "n=1, no interval" in single
    assert "ddp" not in shown
    judged = verdict.all_verdicts(points)
    table = text(verdict_tables(judged)[0])
    assert "engine/backend" in table and "mpi" in table and "ddp" not in table


def test_interval_words():
    from launch.figures import interval_text, value_text

    assert interval_text(None, "Gbit/s", 1, 1) == "n=1, no interval"
    assert interval_text(0.0041, "Gbit/s", 1, 8) == "±0.0041 (1 run)"
    assert interval_text(2.34, "img/s", 3, 24) == "±2.3"
    assert interval_text(12.34, "img/s", 3, 24) == "±12.3"
    assert interval_text(0.0, "img/s", 2, 6) == "±0 (identical samples)"
    assert value_text(0.07396, "Gbit/s") == "0.074" and value_text(4.83, "img/s") == "4.8"
    assert interval_text(0.482, "img/s", 1, 32) == "±0.5 (1 run)" and interval_text(0.0123, "s", 2, 6) == "±0.0123"
