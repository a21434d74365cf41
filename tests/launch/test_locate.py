"""locate's schedule and outlier test, planted-fault syntax, and the emulated Slurm config (fast).
The real thing under Slurm is tests/integration/test_emulated_slurm.py."""

import dataclasses
import itertools
import json
import os
from pathlib import Path

import pytest

from launch.fleet import locate
from launch.fleet.emulate import Cluster, cluster, faults, slurm_nodes
from launch.errors import UsageError
from tests.conftest import fabric_bench


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_rounds_cover_every_pair_once_with_disjoint_pairs(n):
    nodes = [f"n{i}" for i in range(n)]
    schedule = locate.rounds(nodes)
    assert len(schedule) == (n - 1 if n % 2 == 0 else n)
    pairs = [p for r in schedule for p in r]
    assert sorted(pairs) == sorted(itertools.combinations(nodes, 2))
    for r in schedule:
        used = [node for pair in r for node in pair]
        assert len(used) == len(set(used)) and len(r) == n // 2


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 17, 32, 64, 256])
def test_the_screen_is_3n_over_2_pairs_in_at_most_4_rounds_at_any_size(n):
    nodes = [f"n{i:03d}" for i in range(n)]
    pairs = locate.screen_pairs(nodes)
    assert len(pairs) == len(set(pairs)) and all(a < b for a, b in pairs)
    assert len(pairs) == n + n // 2
    assert all(sum(node in pair for pair in pairs) >= 2 for node in nodes)
    assert len(locate.disjoint_rounds(pairs)) <= 4


def fleet(slow_nodes=(), slow_links=(), healthy=0.29, slow=0.07):
    """A fleet's pair bandwidths: a slow node slows every pair it is in, a slow link its own pair."""
    measured = []

    def run(round_pairs, tag):
        used = [node for pair in round_pairs for node in pair]
        assert len(used) == len(set(used)), f"round {tag} has a node twice"
        measured.extend(round_pairs)
        return [
            locate.Pair(a, b, slow if (a in slow_nodes or b in slow_nodes or (a, b) in slow_links) else healthy, None)
            for a, b in round_pairs
        ]

    return run, measured


@pytest.mark.parametrize("n", [20, 64])
@pytest.mark.parametrize("planted", [{}, {"slow_nodes": ("n007",)}, {"slow_links": (("n003", "n004"),)}])
def test_the_screen_names_what_all_pairs_would_in_far_fewer_steps(n, planted):
    nodes = [f"n{i:03d}" for i in range(n)]
    run, measured = fleet(**planted)
    pairs, verdict, rounds_run, steps = locate.measure(
        "1", nodes, None, pattern="screen", run=run, echo=lambda line: None
    )
    assert steps == len(measured)  # every step run is counted: the screen, the suspects, the re-measures
    assert verdict.slow_nodes == list(planted.get("slow_nodes", ()))
    assert verdict.slow_links == list(planted.get("slow_links", ()))
    # all pairs: n(n-1)/2 steps in n-1 rounds; the screen: 3n/2, then the suspects' pairs (a slow
    # node: its 3 partners, 3 more steps), then re-measuring the slow ones (a slow node's 3, one round each)
    assert len(set(measured)) <= 3 * n // 2 + 3 and rounds_run <= 4 + 3 + 3
    run, _ = fleet(**planted)
    everything = locate.measure("1", nodes, None, pattern="all-pairs", run=run, echo=lambda line: None)[1]
    assert (everything.slow_nodes, everything.slow_links) == (verdict.slow_nodes, verdict.slow_links)


def test_the_screen_misses_a_slow_path_between_nodes_it_does_not_pair_and_all_pairs_finds_it():
    """The screen's stated limit, kept honest: n0-n5 of 20 are neither neighbours nor opposite."""
    nodes = [f"n{i}" for i in range(20)]
    assert ("n0", "n5") not in locate.screen_pairs(nodes)
    run, _ = fleet(slow_links=(("n0", "n5"),))
    assert locate.measure("1", nodes, None, pattern="screen", run=run, echo=lambda line: None)[1].slow_links == []
    run, _ = fleet(slow_links=(("n0", "n5"),))
    assert locate.measure("1", nodes, None, pattern="all-pairs", run=run, echo=lambda line: None)[1].slow_links == [
        ("n0", "n5")
    ]


@pytest.mark.parametrize(
    "nodes, pattern, chosen",
    [(16, "auto", "all-pairs"), (17, "auto", "screen"), (4, "screen", "screen"), (64, "all-pairs", "all-pairs")],
)
def test_auto_screens_above_16_nodes(nodes, pattern, chosen):
    assert locate.pattern_for(pattern, nodes) == chosen


def pairs_of(n: int, slow: dict, healthy: float = 0.29) -> list[locate.Pair]:
    return [
        locate.Pair(a, b, slow.get((a, b), healthy), None)
        for a, b in itertools.combinations([f"n{i}" for i in range(n)], 2)
    ]


@pytest.mark.parametrize("n", [3, 4, 6, 8])
def test_a_slow_node_is_named_and_its_pairs_are_not_links(n):
    nodes = [f"n{i}" for i in range(n)]
    slow = {tuple(sorted(("n1", x))): 0.11 for x in nodes if x != "n1"}
    verdict = locate.judge(nodes, pairs_of(n, slow))
    assert verdict.slow_nodes == ["n1"] and verdict.slow_links == []


def test_a_slow_node_that_was_busy_before_the_pairs_is_said_to_be_perhaps_busy_rather_than_slow():
    nodes = [f"n{i}" for i in range(4)]
    verdict = locate.judge(nodes, pairs_of(4, {tuple(sorted(("n1", x))): 0.11 for x in nodes if x != "n1"}))
    verdict.busy = {"n1": "other processes used 0.97 of a core during the quiet check (3.0 s)", "n2": "steal"}
    (line,) = verdict.lines()
    assert (
        line.startswith("slow node n1 (every pair with it is slow")
        and "but it was busy before the pairs (other processes used 0.97 of a core during the quiet check (3.0 s))"
        in line
    )
    assert "n2" not in line  # busy but not slow: nothing to say about a node named for nothing


@pytest.mark.parametrize("n", [3, 4, 8])
def test_a_slow_pair_is_a_link(n):
    nodes = [f"n{i}" for i in range(n)]
    verdict = locate.judge(nodes, pairs_of(n, {("n0", "n1"): 0.07}))
    assert verdict.slow_nodes == [] and verdict.slow_links == [("n0", "n1")]


def test_two_nodes_have_nothing_to_compare_but_the_expected_rate():
    assert locate.judge(["n0", "n1"], pairs_of(2, {("n0", "n1"): 0.07})).slow_links == []
    verdict = locate.judge(["n0", "n1"], pairs_of(2, {("n0", "n1"): 0.07}), expected_gbit_s=0.3)
    assert verdict.slow_links == [("n0", "n1")] and verdict.slow_nodes == []


def test_healthy_noise_names_nothing_and_a_remeasurement_clears_a_stall():
    nodes = [f"n{i}" for i in range(4)]
    pairs = pairs_of(4, {("n0", "n2"): 0.25, ("n1", "n3"): 0.27})
    assert locate.judge(nodes, pairs).slow_pairs == []
    stalled = pairs_of(4, {("n0", "n2"): 0.05})
    assert locate.judge(nodes, stalled).slow_links == [("n0", "n2")]
    stalled[1].remeasured_gbit_s = 0.28  # (n0, n2): its better measurement counts
    assert (stalled[1].a, stalled[1].b) == ("n0", "n2") and locate.judge(nodes, stalled).slow_pairs == []


def test_the_expected_rate_is_the_reference_when_given():
    nodes = ["n0", "n1", "n2"]
    verdict = locate.judge(nodes, pairs_of(3, {}, healthy=0.1), expected_gbit_s=0.3)
    assert verdict.reference_from == "expected link rate" and verdict.slow_nodes == ["n0", "n1", "n2"]


def test_a_failed_pair_is_reported_not_named_slow():
    nodes = ["n0", "n1", "n2"]
    pairs = pairs_of(3, {})
    pairs[0].bandwidth_gbit_s = None
    verdict = locate.judge(nodes, pairs)
    assert verdict.failed_pairs == [("n0", "n1")] and verdict.slow_nodes == [] and verdict.slow_links == []


def test_step_argv_is_an_argv_of_one_step_on_two_named_nodes(tmp_path):
    argv = locate.step_argv("17", ("n0", "n3"), tmp_path, 2**20, None)
    assert argv[:3] == ["srun", "-v", "--jobid=17"] and "--nodelist=n0,n3" in argv and "--mpi=pmix" in argv
    image = locate.step_argv("17", ("n0", "n3"), tmp_path, 2**20, "/x/img.sif")
    assert image[image.index("apptainer") : image.index("apptainer") + 4] == [
        "apptainer",
        "exec",
        "/x/img.sif",
        "python3",
    ]


def test_read_pair_takes_rank_0s_figures_and_the_step_id(tmp_path):
    rec = {
        "kind": "allreduce",
        "rank": 0,
        "host": "n0",
        "p2p": [{"bandwidth_gbit_s": 0.01}, {"bandwidth_gbit_s": 0.28}],
        "sizes": [{"busbw_gbit_s": 0.2}],
    }
    (tmp_path / "rank-0.jsonl").write_text(json.dumps(rec) + "\n")
    (tmp_path / "rank-1.jsonl").write_text(json.dumps({**rec, "rank": 1, "host": "n3"}) + "\n")
    pair = locate.read_pair(("n0", "n3"), tmp_path, "srun: launching StepId=17.4 on host n0", "17", 0)
    assert (pair.bandwidth_gbit_s, pair.busbw_gbit_s, pair.step_id, pair.hosts) == (0.28, 0.2, "17.4", ["n0", "n3"])
    broken = locate.read_pair(("n0", "n3"), tmp_path / "none", "srun: error: n3: task 1: Exited", "17", 1)
    assert broken.bandwidth_gbit_s is None and "task 1" in broken.error


def test_heatmap_png_and_html(tmp_path):
    nodes = ["n0", "n1", "n2"]
    pairs = pairs_of(3, {("n0", "n1"): 0.07})
    verdict = locate.judge(nodes, pairs)
    data = locate.write(tmp_path, nodes, pairs, verdict, 3, 4, "9", 2**20, 1.0)
    assert data["slow_links"] == [["n0", "n1"]]
    assert (tmp_path / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    page = (tmp_path / "heatmap.html").read_text()
    assert "slow link n0-n1" in page and page.count("<tr>") == 4 + 1 + 3


@pytest.mark.parametrize(
    "links, slow, expected",
    [
        (["300mbit"], [], (300e6, faults.Faults())),
        (["300mbit", "n1=100mbit"], [], (300e6, faults.Faults(node_rates=((1, 100e6),)))),
        (
            ["300mbit", "n3-n1=75mbit"],
            ["n2"],
            (300e6, faults.Faults(pair_rates=((1, 3, 75e6),), slow_nodes=((2, None),))),
        ),
    ],
)
def test_faults_parse(links, slow, expected):
    assert faults.parse(links, slow, 4) == expected


@pytest.mark.parametrize(
    "links, slow, message",
    [
        (["300mbit", "n4=1g"], [], "n0..n3"),
        (["300mbit", "n1-n1=1g"], [], "two different"),
        (["n0-n1=1g"], [], "needs the cluster's rate"),
        (["1g", "2g"], [], "twice"),
        ([], ["x3"], "n0..n3"),
    ],
)
def test_bad_faults_are_one_line_usage_errors(links, slow, message):
    with pytest.raises(UsageError, match=message):
        faults.parse(links, slow, 4)


def test_a_slow_node_sends_at_a_quarter_and_a_bad_pair_gets_its_own_class():
    f = faults.Faults(pair_rates=((0, 2, 75_000_000),), slow_nodes=((1, None),))
    assert f.egress_rate(1, 300_000_000) == 75_000_000 and f.egress_rate(0, 300_000_000) == 300_000_000
    assert f.degraded_peers(2) == [(0, 75_000_000)] and f.degraded_peers(1) == []
    argv = cluster.htb_argv(300_000_000, [("10.213.0.3", 75_000_000)])
    assert argv[0][:6] == ["qdisc", "replace", "dev", "fbemu0", "root", "handle"]
    assert ["match", "ip", "dst", "10.213.0.3/32", "flowid", "1:2"] == argv[-1][-6:]
    assert faults.Faults.from_state(json.loads(json.dumps({"pair_rates": [[0, 2, 5]]}))).pair_rates == ((0, 2, 5),)


def test_slurm_conf_puts_each_node_at_its_namespace_address(tmp_path):
    text = slurm_nodes.conf_text(Cluster("x", 3, 10**8), tmp_path, "host", 7001, 7002)
    assert f"SlurmctldHost=host({slurm_nodes.HOST_ADDRESS})" in text
    assert "NodeName=n2 NodeAddr=10.213.0.3" in text and "PartitionName=emu Nodes=n0,n1,n2" in text
    assert "AuthType=auth/none" in text and "MpiDefault=pmix" in text and "ProctrackType=proctrack/linuxproc" in text


def test_the_emulated_nodes_share_this_host_s_cores(monkeypatch):
    """Each emulated node offers its share of the cores (SLURM_CPUS_ON_NODE, so OMP_NUM_THREADS):
    all of them each had two 1-rank nodes on 2 cores run 4 OpenMP threads."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert [slurm_nodes.cpus_per_node(n) for n in (1, 2, 4)] == [2, 1, 1]
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert [slurm_nodes.cpus_per_node(n) for n in (1, 3, 4, 32)] == [16, 5, 4, 1]
    text = slurm_nodes.conf_text(Cluster("x", 4, 10**8), Path("/tmp"), "host", 7001, 7002)
    assert "CPUs=4" in text and "CPUs=16" not in text


def test_a_node_asks_no_name_server_through_the_host(tmp_path):
    """The name servers an emulated Slurm node gets an unreachable route to: the host's IPv4 ones
    its default route would carry, not loopback, IPv6 or the cluster's own subnet."""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(
        "# a comment\nsearch example.org\nnameserver 10.255.255.53\nnameserver 127.0.0.53\n"
        "nameserver fd00::53\nnameserver 10.213.0.9\nnameserver not-an-address\nnameserver 192.0.2.1 # x\n"
        "nameserver 10.255.255.53\n"
    )
    assert slurm_nodes.host_nameservers(resolv) == ["10.255.255.53", "192.0.2.1"]
    assert slurm_nodes.host_nameservers(tmp_path / "missing") == []


def test_locate_bad_input_is_one_line():
    proc = fabric_bench("locate", "--bytes", "3")
    assert proc.returncode == 2 and "multiple of 4" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = fabric_bench("locate", "--pattern", "bisect")
    assert proc.returncode == 2 and "unknown pattern 'bisect'" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = fabric_bench("site", "init", "--emulated", "nosuch", "-o", "/tmp/never-written.toml", "--force")
    assert proc.returncode == 2 and "no emulated Slurm cluster" in proc.stderr


def test_excluded_nodes_reach_srun_and_sbatch_but_not_the_points_key(tmp_path):
    from launch.plan.experiment import Point
    from launch.ranks.launchers import Plan, sbatch_script, srun_argv
    from launch.ranks.runspec import RunSpec
    from launch.ranks.runtimes import HostRuntime

    spec = RunSpec(launcher="srun", nodes=2, ranks=2, benchmark="allreduce", exclude_nodes="n1,n[3-4]").validated()
    plan = Plan(record_dir=tmp_path / "ranks", runtime=HostRuntime())
    assert "--exclude=n1,n[3-4]" in srun_argv(spec, plan, {})
    batch = dataclasses.replace(spec, launcher="sbatch")
    assert "#SBATCH --exclude=n1,n[3-4]\n" in sbatch_script(batch, plan)
    assert Point(spec).key == Point(dataclasses.replace(spec, exclude_nodes=None)).key
    with pytest.raises(UsageError, match="Slurm node list"):
        dataclasses.replace(spec, exclude_nodes="n1; reboot").validated()


def test_exclude_located_takes_the_slow_nodes_of_a_locate_result_and_refuses_others(tmp_path):
    good = tmp_path / "locate.json"
    good.write_text(json.dumps({"kind": "locate", "slow_nodes": ["n2"], "slow_links": [["n0", "n1"]]}))
    assert locate.named_nodes(good) == ["n2"]
    for bad in ({"kind": "other"}, {"kind": "locate", "slow_nodes": ["n2; rm -rf /"]}, [1]):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(UsageError, match="not a locate result"):
            locate.named_nodes(path)


def test_the_report_shows_a_locate_runs_heat_map_and_what_it_named(tmp_path):
    """`fabric-bench report DIR` over a locate run: the pairwise heat-map among its plots (PNG and
    the HTML page) and the named link in its data; a locate.json edited into a wrong shape is one
    skipped line, the rest of the report still built."""
    from launch.analysis import report

    nodes = ["n0", "n1", "n2", "n3"]
    pairs = pairs_of(4, {("n1", "n3"): 0.07})
    located = tmp_path / "located"
    located.mkdir()
    locate.write(located, nodes, pairs, locate.judge(nodes, pairs), 3, 7, "9", 2**20, 1.0)
    data = report.build([tmp_path], tmp_path / "report")
    assert data["locate"][0]["slow_links"] == [("n1", "n3")] and data["locate"][0]["slow_nodes"] == []
    assert data["plots"]["locate_heatmap"]["title"].startswith("pair bandwidth")
    page = (tmp_path / "report" / "report.html").read_text()
    assert 'id="plot-locate_heatmap"' in page and "slow link n1-n3" in page and "4 nodes (all-pairs)" in page
    assert data["locate"][0]["pattern"] == "all-pairs"
    # a locate.json written before the screen existed (no pattern) reads as all pairs; a wrong one is refused
    older = json.loads((located / "locate.json").read_text())
    del older["pattern"]
    assert locate.read_locate(_written(tmp_path / "older.json", older))["pattern"] == "all-pairs"
    with pytest.raises(UsageError, match="'ring' is not a pattern"):
        locate.read_locate(_written(tmp_path / "wrong.json", {**older, "pattern": "ring"}))
    broken = tmp_path / "broken"
    broken.mkdir()
    edited = json.loads((located / "locate.json").read_text())
    edited["pairs"][0]["best_gbit_s"] = "fast"
    (broken / "locate.json").write_text(json.dumps(edited))
    assert len(report.build([tmp_path], tmp_path / "report2").get("locate", [])) == 1


def _written(path, data: dict):
    path.write_text(json.dumps(data))
    return path


# -- what a sweep leaves out (launch.fleet.located) -------------------------------------------------
def test_a_slow_link_loses_one_end_and_the_fewest_nodes_cut_several_links(tmp_path):
    from launch.fleet import located

    assert located.cover([("n1", "n3")]) == ["n1"]  # a tie: the first by name
    assert located.cover([("n0", "n5"), ("n1", "n5"), ("n2", "n5")]) == ["n5"]  # one node, not three
    assert located.cover([("n0", "n1"), ("n1", "n2"), ("n2", "n3")]) == ["n0", "n2"]  # a path: 2 of 4, first by name
    assert located.cover([("n2", "n10")]) == ["n2"]  # names compared as numbers
    assert located.cover([("n1", "n3")], {"n3": (0, 0.1), "n1": (0, 0.3)}) == ["n3"]  # the slower end
    ring = [(f"n{i}", f"n{(i + 1) % 30}") for i in range(30)]  # beyond the exact search: greedy
    chosen = located.cover(ring)
    assert all(set(chosen) & set(link) for link in ring) and len(chosen) <= 20

    # a link-only locate.json as locate writes it: the end whose other pairs measured slower goes
    nodes = ["n0", "n1", "n2", "n3"]
    pairs = pairs_of(4, {("n1", "n3"): 0.07, ("n0", "n3"): 0.25, ("n2", "n3"): 0.25})
    (tmp_path / "located").mkdir()
    locate.write(tmp_path / "located", nodes, pairs, locate.judge(nodes, pairs), 3, 7, "9", 2**20, 1.0)
    left = located.leave_out(tmp_path / "located" / "locate.json")
    assert left.nodes == ["n3"] and left.node_list == "n3"
    assert left.lines() == [
        f"leaving out n3 (named in {tmp_path}/located/locate.json): one end of slow link "
        "n1-n3; its other pairs measured slower than n1's (0.25 vs 0.29 Gbit/s)"
    ]
    # a mixed one: the slow node goes whole, one node cuts the two links it does not already cut
    mixed = _written(
        tmp_path / "mixed.json",
        {"kind": "locate", "slow_nodes": ["n2"], "slow_links": [["n0", "n1"], ["n1", "n3"], ["n2", "n3"]]},
    )
    left = located.leave_out(mixed)
    assert left.nodes == ["n1", "n2"]
    assert left.why == {"n1": "one end of slow links n0-n1, n1-n3", "n2": "slow node (every pair with it is slow)"}
    assert located.leave_out(_written(tmp_path / "none.json", {"kind": "locate", "slow_nodes": []})).lines() == [
        f"--exclude-located {tmp_path}/none.json: nothing to leave out (no slow node or link named)"
    ]
    for bad in ([["n1"]], [["n1", "n1"]], [["n1", "n3; reboot"]], "n1-n3"):
        with pytest.raises(UsageError, match="slow_links, a list of"):
            located.leave_out(_written(tmp_path / "bad.json", {"kind": "locate", "slow_nodes": [], "slow_links": bad}))


class SlurmController:
    """A real slurmctld whose partition holds `nodes` (no slurmd: sinfo counts them, nothing runs)."""

    def __init__(self, directory, nodes: int):
        from tests.slurm_cluster import SlurmCluster, slurm_conf
        from containers.host import free_ports

        self.cluster = SlurmCluster(directory)
        conf = slurm_conf(directory, self.cluster.host, 1, *free_ports(2), nodes=[(f"n[0-{nodes - 1}]", "127.0.0.1")])
        for sub in ("state", "spool", "tmp"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        self.cluster.conf.write_text(conf)
        self.env = self.cluster.env
        self.nodes = nodes

    def __enter__(self):
        import subprocess
        import time

        self.daemon = subprocess.Popen(
            ["slurmctld", "-D", "-f", str(self.cluster.conf)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = subprocess.run(
                ["sinfo", "--noheader", "--format=%D"], env=self.env, capture_output=True, text=True, timeout=10
            ).stdout.split()
            if out and sum(int(n) for n in out if n.isdigit()) == self.nodes:
                return self
            time.sleep(0.3)
        self.__exit__()
        raise RuntimeError("slurmctld did not answer within 30 s")

    def __exit__(self, *exc):
        self.daemon.terminate()
        self.daemon.wait(timeout=15)


@pytest.mark.slurm
def test_srun_outside_an_allocation_gives_each_rank_a_share_of_the_partition_s_nodes(tmp_path, monkeypatch, request):
    """Outside an allocation a rank's CPUs are counted on the partition's nodes (sinfo, a real
    slurmctld whose nodes have 1 CPU), not on the host that submits (here: 8)."""
    from launch.fleet import slurm
    from launch.ranks import launchers
    from launch.ranks.runspec import RunSpec
    from tests.conftest import need
    from tests.slurm_cluster import available

    need(available() and os.geteuid() == 0, "Slurm (scripts/setup.sh --test) and root")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    spec = RunSpec(benchmark="allreduce", launcher="srun", nodes=2, ranks=2, partition="debug")
    request.addfinalizer(slurm.node_cpus.cache_clear)  # this cluster's answer is not the next test's, passed or failed
    with SlurmController(tmp_path / "two", 2) as two:
        monkeypatch.setenv("SLURM_CONF", str(two.cluster.conf))
        slurm.node_cpus.cache_clear()
        assert slurm.node_cpus("debug") == 1 and launchers.cpus_per_rank(spec) == 1
    slurm.node_cpus.cache_clear()
    monkeypatch.delenv("SLURM_CONF")  # no configuration: sinfo fails at once
    assert slurm.node_cpus("debug") is None and launchers.cpus_per_rank(spec) == 8  # Slurm not asked: this host's


@pytest.mark.slurm
def test_sweep_exclude_located_acts_on_a_slow_link_or_refuses_in_one_line(tmp_path):
    """`sweep --exclude-located` over a link-only locate.json, against a real slurmctld: with 5
    nodes one end of the link is left out (said, and in the job's --exclude-nodes); with 4 nodes
    the 4-node points cannot leave it out: one line naming the --exclude-nodes, exit 2."""
    from tests.conftest import need
    from tests.slurm_cluster import available

    need(available() and os.geteuid() == 0, "Slurm (scripts/setup.sh --test) and root")
    link_only = _written(tmp_path / "locate.json", {"kind": "locate", "slow_nodes": [], "slow_links": [["n1", "n3"]]})
    argv = [
        "sweep",
        "experiments/emulated-slurm.experiment.toml",
        "--exclude-located",
        str(link_only),
        "--dir",
        str(tmp_path / "sweep"),
        "--dry-run",
    ]
    with SlurmController(tmp_path / "five", 5) as five:
        proc = fabric_bench(*argv, "--launcher", "sbatch", "--one-job", env=five.env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        f"leaving out n1 (named in {link_only}): one end of slow link n1-n3; "
        "n3 would do as well: the first by name goes"
    )
    assert "--exclude-nodes n1" in proc.stdout  # the job's sweep leaves it out of every point
    assert "   1 rank   allreduce-mpi-nofabric-n1x1-r0" in proc.stdout  # one rank, not "1 ranks"
    assert "3 runs (1 1-rank baseline, 1 repetition); 3 to run" in proc.stdout
    with SlurmController(tmp_path / "four", 4) as four:
        proc = fabric_bench(*argv, env=four.env)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "fabric-bench: error: emulated-slurm.experiment.toml: [matrix].nodes: 4 nodes asked, but partition "
        f"(default) has 4, and --exclude-located {link_only} leaves out n1 (one end of slow link n1-n3): 3 left; "
        "with points of at most 3 nodes, --exclude-nodes n1 does it"
    )


def test_what_locate_prints_and_draws_reads_with_units():
    """The re-measurement line has the bandwidth rounded, with its unit and step (not a bare float);
    the heat-map's title says what the colour is against, whole, within the image."""
    from launch.analysis.plots import cut_off_text

    lines = []
    run, _ = fleet(slow_links=(("n1", "n3"),), healthy=0.2841234, slow=0.07396402530817145)
    locate.measure("1", ["n0", "n1", "n2", "n3"], None, run=run, echo=lines.append)
    assert "again: n1-n3 0.074 Gbit/s" in lines
    nodes = ["n0", "n1", "n2", "n3"]
    pairs = pairs_of(4, {("n1", "n3"): 0.07})
    fig = locate.heatmap_figure(nodes, locate.matrix(nodes, pairs), 0.284)
    fig.canvas.draw()
    assert fig.axes[0].get_title() == "pair bandwidth, Mbit/s\ncolour: share of the 284 Mbit/s reference"
    assert fig.axes[1].get_ylabel() == "share of the reference"
    assert cut_off_text(fig) == []


def test_report_of_a_locate_directory_prints_what_it_drew(tmp_path):
    """`fabric-bench report located` (the README's last step): the heat-map's line in one line, no
    verdict about runs it does not have, and the page's line counts the locate result."""
    nodes = ["n0", "n1", "n2", "n3"]
    pairs = pairs_of(4, {("n1", "n3"): 0.07})
    located = tmp_path / "located"
    located.mkdir()
    locate.write(located, nodes, pairs, locate.judge(nodes, pairs), 3, 7, "9", 2**20, 1.0)
    proc = fabric_bench("report", str(located), "--output", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{tmp_path}/report/locate_heatmap.png: pair bandwidth, Mbit/s; colour: share of the 290 Mbit/s reference",
        f"{tmp_path}/report/report.html (0 runs, 1 locate result)",
    ]
