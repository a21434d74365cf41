"""Numbers and text from another site's results (issue 50): a sample is a finite number in its
plausible range or its result is refused in one line; the interval `compare` recomputes cannot be
widened into "everything is within" by a few wild samples; a string from a result never brings
an escape sequence or rich markup to the terminal; a locate.json is bounded in what it names."""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import time

import pytest
from rich.console import Console

from bench.allreduce import busbw_factor, figures
from bench.stats import MEDIAN_INTERVAL_K, median_interval, robust
from launch.errors import UsageError
from launch.fleet import locate, located
from launch.analysis import compare as cmp
from launch.results.result import as_result
from tests.conftest import fabric_bench
from tests.results import allreduce_result, train_result
from tests.security.conftest import hostile_result

HIDDEN = "resnet\x1b[8m18 [red]hidden[/red]\x1b[0m"  # ESC[8m conceals what follows; markup recolours


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def with_samples(samples, run_id="foreign", **fields) -> dict:
    result = {**hostile_result(run_id), **fields}
    result["samples"] = {"total_img_per_s": samples}
    return result


def slow(run_id="slow", **fields) -> dict:
    """A candidate at half the reference's 10 img/s: never within."""
    result = with_samples([4.9, 5.0, 5.1], run_id, **fields)
    result["throughput"] = {"total_img_per_s": 5.0, "ci95_img_per_s": 0.2484}
    return result


# ------------------------------------------------------------------ samples


@pytest.mark.parametrize(
    "samples, field",
    [
        ([1e300, -1e300, 3000], "samples.total_img_per_s[0] 1e+300"),  # a CI spanning everything
        ([1e308, 1e308], "samples.total_img_per_s[0] 1e+308"),  # the mean overflowed: a traceback
        ("[1e999, 10, 11]", "not a non-empty list of finite numbers"),  # Infinity, written as a number
        ("[-1e999, 10, 11]", "not a non-empty list of finite numbers"),
        ([-5.0, 10.0, 11.0], "samples.total_img_per_s[0] -5.0"),  # negative throughput
        ([0.0, 10.0, 11.0], "samples.total_img_per_s[0] 0.0"),  # nothing is done at 0 img/s
        ([9.0, 10.0, 1e7], "samples.total_img_per_s[2] 10000000.0"),  # 5e6 img/s per rank
    ],
)
@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_an_implausible_sample_refuses_its_result_in_one_line(tmp_path, samples, field, side):
    text = json.dumps(with_samples("SAMPLES")).replace(
        '"SAMPLES"', samples if isinstance(samples, str) else json.dumps(samples)
    )
    hostile = write(tmp_path / "hostile" / "result.json", text)
    fine = write(tmp_path / "fine" / "result.json", slow())
    proc = fabric_bench("compare", *(str(p) for p in ((hostile, fine) if side == "reference" else (fine, hostile))))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert str(hostile) in proc.stderr and field in proc.stderr and "Traceback" not in proc.stderr


def test_a_size_sweep_s_time_below_what_any_fabric_does_refuses_its_result(tmp_path):
    """8 MiB in a nanosecond is 67 Pbit/s: a time no link gives."""
    nbytes = 8 * 2**20
    row = {"bytes": nbytes, **figures(nbytes, [2e-3, 2.1e-3, 2.2e-3], busbw_factor(2))}
    fine = write(tmp_path / "a" / "result.json", allreduce_result("a", sizes=[row]))
    quick = write(tmp_path / "b" / "result.json", allreduce_result("b", sizes=[{**row, "samples_us": [1e-3] * 3}]))
    proc = fabric_bench("compare", str(fine), str(quick))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "sizes[0].samples_us[0] 0.001 is refused" in proc.stderr
    same = fabric_bench("compare", str(fine), str(fine), "--json")  # a real row still compares
    assert same.returncode == 0 and json.loads(same.stdout)["metrics"][0]["metric"] == f"busbw_gbit_s@{nbytes}"


@pytest.mark.parametrize(
    "samples",
    [
        [9.0, 10.0, 11.0, 10.0, 9.5, 10.5, 10.0, 10.2, 1e6, 2e6],  # two wild of ten: the median, no interval
        [9.0, 10.0, 11.0, 10.0, 9.5, 10.5, 10.0, 10.2, 9.8, 10.1, 1e6, 2e6],  # of twelve: the median's interval
        [5.0, 1e6],  # two samples: no interval at all
        [10.0, 1e6, 2e6],  # an interval reaching zero is none
    ],
)
def test_wild_but_plausible_samples_cannot_make_a_slow_candidate_within(tmp_path, samples):
    """Before: the mean's t-interval of these spanned every candidate, and compare exited 0."""
    a = write(tmp_path / "a" / "result.json", with_samples(samples))
    b = write(tmp_path / "b" / "result.json", with_samples([1.0, 1.0, 1.0], "b"))
    proc = fabric_bench("compare", str(a), str(b), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    total = next(m for m in json.loads(proc.stdout)["metrics"] if m["metric"] == "total_img_per_s")
    assert total["within"] is False and (total["ci95_a"] is None or total["ci95_a"] < 1.0), total


def test_two_wild_values_among_five_or_more_widen_nothing():
    rng = random.Random(50)
    for n in range(5, 40):
        honest = [rng.gauss(100.0, 2.0) for _ in range(n - 2)]
        for wild in ([1e6, 1e6], [1e-3, 1e6], [1e-3, 1e-3], [1e9, 1e9]):
            found = robust(honest + wild)
            assert 90 < found.value < 110, (n, wild, found)
            assert found.ci95 is None or found.ci95 < 10, (n, wild, found)
    clean = robust([9.0, 10.0, 11.0])  # well-behaved samples keep the interval the run reports
    assert clean.method == "mean, Student t" and clean.ci95 == pytest.approx(2.484, rel=1e-3)


def test_the_median_s_interval_is_distribution_free_and_its_ends_are_k_in():
    assert median_interval(list(range(11))) is None  # k = 2: two wild values on one side reach its end
    assert median_interval([float(i) for i in range(1, 13)]) == (3.0, 10.0)  # n = 12: k = 3
    assert median_interval([float(i) for i in range(1, 101)]) == (40.0, 61.0)  # the textbook's n = 100
    rng, misses = random.Random(1), 0
    for _ in range(2000):  # coverage of the true median (0) is at least 95 % for any distribution
        lo, hi = median_interval([rng.expovariate(1.0) - 0.6931 for _ in range(30)]) or (0, 0)
        misses += not lo <= 0 <= hi
    assert misses / 2000 < 0.06 and MEDIAN_INTERVAL_K == 3


def test_an_overflow_in_the_figures_is_one_line():
    with pytest.raises(UsageError, match="the figures cannot be computed"):
        cmp.compare_pair(as_result(with_samples([1e308] * 3)), as_result(hostile_result()), {})


# ------------------------------------------------------------------ text


def test_a_hidden_model_name_and_markup_reach_compare_s_terminal_inert(tmp_path):
    """A model name with ESC[8m hid the 'not within' lines that followed it; its markup recoloured."""
    a = write(tmp_path / "a" / "result.json", {**hostile_result(), "model": HIDDEN})
    b = write(tmp_path / "b" / "result.json", slow(model=HIDDEN))
    proc = fabric_bench("compare", str(a), str(b))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr
    shown = [line for line in proc.stdout.splitlines() if line.startswith("not within: ddp/")]
    assert len(shown) == 2 and all("resnet18 [red]hidden[/red] x2" in line for line in shown), proc.stdout
    assert sum("resnet18 [red]hidden[/red] x2" in line for line in proc.stdout.splitlines()) == 4  # the table too


def test_the_report_and_the_results_history_print_foreign_names_inert(tmp_path):
    runs = tmp_path / "runs"
    for ranks, img in ((1, 10.0), (2, 18.0)):
        write(
            runs / f"r{ranks}" / "result.json",
            train_result(f"r{ranks}\x1b]0;title\x07", img=img, ranks=ranks, model=HIDDEN),
        )
    report = fabric_bench("report", str(runs), "--output", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    assert "\x1b" not in report.stdout and "\x07" not in report.stdout  # the plots' labels: launch.analysis.plots
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite")}
    assert fabric_bench("results", "index", str(runs), env=env).returncode == 0
    listed = fabric_bench("results", "list", env=env)
    assert listed.returncode == 0 and "\x1b" not in listed.stdout + listed.stderr
    assert "[red]hidden[/red]" in listed.stdout


def test_the_tables_and_headlines_made_from_results_hold_no_escape_and_no_live_markup():
    from rich.text import Text

    from launch.analysis import aggregate, headline, report_tables, table

    causes = [{"signal": "cpu\x1b[2J", "words": "[blink]busy[/blink]\x1b[8m"}]
    results = [
        as_result(
            train_result(f"r{n}", img=10.0 * n, ranks=n, model=HIDDEN, status="ok", schema_version=3)
            | {"disturbance": {"verdict": "disturbed", "causes": causes}}
        )
        for n in (1, 2)
    ]
    out = io.StringIO()
    console = Console(file=out, width=300, color_system=None)
    points = aggregate.aggregate(results)
    console.print(table.training_table(results))
    console.print(table.points_table(points, "[bold]points[/bold]"))
    printed = out.getvalue()
    assert "\x1b" not in printed and "[red]hidden[/red]" in printed and "[bold]points[/bold]" in printed
    lines = [headline.disturbance_line(results[0]), headline.unreadable(results) or "", headline.run_name(results[0])]
    assert not any("\x1b" in line for line in lines) and "[blink]busy[/blink]" in lines[0]
    for _header, rows in (
        report_tables.runs_table(results, points),
        report_tables.health_table(results),
        report_tables.points_table(points),
    ):
        assert rows and not any("\x1b" in cell for row in rows for cell in row)
    verdict = {"v": {"title": "t\x1b[8m", "rows": [], "paragraph": "p [red]x[/red]\x1b[8m"}}
    shown = table.verdict_tables(verdict)
    assert all(isinstance(part, Text) and "\x1b" not in part.plain for part in shown)


# ------------------------------------------------------------------ locate.json


def test_a_locate_result_of_100000_repeated_links_is_refused_in_one_line_at_once(tmp_path):
    """Before: `sweep --exclude-located` ranked each of the 200000 ends against every link: minutes."""
    path = write(tmp_path / "locate.json", {"kind": "locate", "slow_nodes": [], "slow_links": [["n1", "n3"]] * 100_000})
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"names 100000 slow links, more than any locate finds \(at most 4096\)"):
        located.leave_out(path)
    assert time.monotonic() - started < 5  # the JSON reader's share; the exclusion's own is below
    proc = fabric_bench(
        "sweep", "experiments/cpu-small.experiment.toml", "--launcher", "srun", "--exclude-located", str(path),
        "--dry-run", "--dir", str(tmp_path / "sweep"), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "more than any locate finds" in proc.stderr


def test_the_exclusion_is_not_quadratic_in_what_a_locate_result_names(monkeypatch, tmp_path):
    """4096 links among 3000 nodes and 50000 measured pairs (the most it takes): under a second
    once read (before: the greedy cover and the ranking each scanned every link per end, minutes)."""
    rng = random.Random(41)
    nodes = [f"n{i}" for i in range(3000)]
    links = sorted({(a, b) for a, b in (sorted(rng.sample(nodes, 2)) for _ in range(located.MAX_NAMED))})
    pairs = {
        frozenset(p): rng.uniform(0.1, 1.0) for p in itertools.islice(itertools.combinations(nodes[:400], 2), 50_000)
    }
    monkeypatch.setattr(locate, "named", lambda path, cluster=None: locate.Named([], links, pairs))
    started = time.monotonic()
    left = located.leave_out(tmp_path / "locate.json", nodes)
    assert time.monotonic() - started < 1.0
    assert all(set(link) & set(left.nodes) for link in links)


def test_a_link_written_again_or_reversed_is_one_link(tmp_path):
    body = {"kind": "locate", "slow_nodes": ["n5", "n5"], "slow_links": [["n1", "n3"], ["n3", "n1"]] * 2000}
    left = located.leave_out(write(tmp_path / "locate.json", body), ["n1", "n3", "n5"])
    assert left.nodes == ["n1", "n5"] and left.why["n1"] == "one end of slow link n1-n3"
    with pytest.raises(UsageError, match="names node 'n3', which is not in this cluster"):
        located.leave_out(tmp_path / "locate.json", ["n1", "n5"])
    nodes = [f"n{i}" for i in range(20)]  # every pair of 20 nodes slow: the exact search is bounded
    started = time.monotonic()
    assert len(located.cover(list(itertools.combinations(nodes, 2)))) == 19
    assert time.monotonic() - started < 1.0  # before: 15 s
