"""Emulated clusters: rate syntax and bad input (fast), real namespaces (slow, root).

Every real test leaves no fbemu-* namespace, veth, bridge or qdisc behind (the
`clean_host` fixture checks and cleans, also when the test fails).
"""

import json
import os
import shutil
import subprocess

import pytest

from launch.fleet import emulate
from launch.ranks import emulated
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from tests.conftest import fabric_bench, need


@pytest.mark.parametrize(
    "text, bit_s",
    [
        ("1gbit", 10**9),
        ("1g", 10**9),
        ("10GBIT", 10**10),
        ("500mbit", 5 * 10**8),
        ("2.5gbit/s", 25 * 10**8),
        ("100kbit", 10**5),
    ],
)
def test_rates_parse(text, bit_s):
    assert emulate.parse_rate(text) == bit_s


@pytest.mark.parametrize("text", ["1gbps", "fast", "", "0gbit", "-1gbit", "1 gigabit", "1e9"])
def test_unknown_rates_are_usage_errors(text):
    with pytest.raises(UsageError, match="unknown link rate"):
        emulate.parse_rate(text)


def test_emulated_fabric_names_carry_their_rate():
    assert emulate.fabric_rate_bit_s("emu-eth-1g") == 10**9
    assert emulate.fabric_rate_bit_s("emu-eth-10g") == 10**10
    spec = RunSpec(launcher="emulated", nodes=2, fabric="emu-eth-10g")
    assert emulate.link_rate_gbit_s(spec) == 10.0
    with pytest.raises(UsageError, match="contradicts"):
        emulate.run_rate_bit_s(RunSpec(launcher="emulated", nodes=2, fabric="emu-eth-1g", link_rate="5gbit"))
    with pytest.raises(UsageError, match="--launcher emulated"):
        emulate.run_rate_bit_s(RunSpec(launcher="mpirun", fabric="emu-eth-1g"))


def test_tbf_burst_is_three_ms_at_the_rate():
    args = emulate.tbf_args(10**9)
    assert args[:3] == ["tbf", "rate", str(10**9)]
    assert int(args[args.index("burst") + 1]) == 375_000


def test_run_uses_namespaces_and_an_argv_without_user_shell_strings():
    cluster = emulate.Cluster("abc", 2, 10**9)
    argv = emulate.in_node(cluster, 0, ["python", "-m", "bench.allreduce", "--x", "a b; rm -rf /"])
    assert argv[:4] == ["ip", "netns", "exec", "fbemu-abc-n0"] and argv[-1] == "a b; rm -rf /"
    args = emulate.mpirun_args(cluster, 2)
    assert args[args.index("--host") + 1] == "fbemu-abc-n0:2,fbemu-abc-n1:2"
    assert os.access(args[args.index("plm_rsh_agent") + 1], os.X_OK)


def test_emulated_ranks_poll_for_horovod_and_share_the_cores():
    """All emulated nodes share this host's cores: a thread share per rank, and Horovod waits
    that poll (bench.horovod_settings) instead of holding a core the other node's rank needs."""
    from bench import horovod_settings
    from launch.ranks.runspec import RunSpec

    env = emulated.fabric_env(RunSpec(launcher="emulated", nodes=2, ranks=2, link_rate="1gbit"))
    assert env[horovod_settings.WAIT_ENV] == "poll"
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))


def test_not_root_is_one_line(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(UsageError, match="need root"):
        emulate.require_root()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "1"], "needs --nodes >= 2"),
        (["--nodes", "2", "--link-rate", "1gbps"], "unknown link rate '1gbps'"),
        (["--nodes", "2", "--fabric", "emu-eth-fast"], "unknown emulated fabric"),
        (["--nodes", "2", "--fabric", "ethernet"], "emulates ethernet links"),
    ],
)
def test_bad_emulated_runs_are_one_line_exit_2(args, message, tmp_path):
    proc = fabric_bench(
        "run", "--benchmark", "allreduce", "--launcher", "emulated", "--dry-run", "--results", str(tmp_path), *args
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_emulate_up_bad_input_is_one_line_exit_2():
    for args, message in ((["--nodes", "1"], "--nodes >= 2"), (["--link-rate", "x"], "unknown link rate")):
        proc = fabric_bench("emulate", "up", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


# -- real namespaces ------------------------------------------------------------


def root_namespace_network() -> str:
    """Links and qdiscs of the root network namespace, as text."""

    def out(*argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout

    return out("ip", "-o", "link") + out("tc", "qdisc", "show")


@pytest.fixture
def clean_host():
    """Fails (and cleans up) when a test leaves a cluster behind. Clusters of other
    live processes on this shared machine are not this test's business."""
    need(os.geteuid() == 0, "emulated clusters need root")
    need(all(shutil.which(t) for t in ("ip", "tc", "unshare", "mpirun")), "ip, tc, unshare and mpirun are needed")
    before = {s.name for s in emulate.status()}
    try:
        yield
    finally:
        left = [s for s in emulate.status() if s.name not in before and (s.leftover or s.name == "fbtest")]
        for s in left:
            emulate.down(s.name)
        assert not left, f"left behind: {[s.namespaces for s in left]}"
        root = root_namespace_network()
        assert emulate.PREFIX not in root and " tbf " not in root  # nothing ever lands in the root namespace


def run_emulated(tmp_path, *args, timeout=240):
    out = tmp_path / "results"
    proc = fabric_bench("run", "--launcher", "emulated", "--nodes", "2", "--results", str(out), *args, timeout=timeout)
    results = sorted(out.glob("*/result.json"))
    assert proc.returncode == 0 and results, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(results[-1].read_text())


@pytest.mark.slow
def test_allreduce_busbw_follows_the_shaped_rate(clean_host, tmp_path):
    """At 16 MiB, busbw is lower on the 1 Gbit link than on the 3 Gbit link, and
    between 0.5x and 1.05x the shaped rate (0.93-0.95x measured on a quiet host;
    the lower bound leaves room for the shared 2-core CI machine)."""
    busbw = {}
    for rate in (1, 3):
        result = run_emulated(
            tmp_path / f"{rate}g",
            "--benchmark",
            "allreduce",
            "--backend",
            "torch",
            "--link-rate",
            f"{rate}gbit",
            "--min-bytes",
            str(2**22),
            "--max-bytes",
            str(2**24),
            "--iters",
            "3",
            "--warmup",
            "1",
            "--max-seconds-per-size",  # 3 samples of 1-3 operations a size: the rate shows in each
            "1",
        )
        assert result["status"] == "ok" and result["link_rate_gbit_s"] == rate
        assert all(row["n_samples"] == 3 for row in result["sizes"]) and result["spec"]["max_seconds_per_size"] == 1
        assert len(result["hosts"]) == 2 and all(h.startswith("fbemu-") for h in result["hosts"])
        busbw[rate] = result["sizes"][-1]["busbw_gbit_s"]
        assert 0.5 * rate <= busbw[rate] <= 1.05 * rate, busbw
    assert busbw[1] < busbw[3]


@pytest.mark.slow
def test_training_across_namespaces_ends_with_identical_parameters(clean_host, tmp_path):
    result = run_emulated(
        tmp_path,
        "--engine",
        "ddp",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--iters",
        "2",
        "--batches-per-iter",
        "1",
        "--warmup",
        "1",
        "--fabric",
        "emu-eth-3g",
    )
    assert result["status"] == "ok", result["reason"]
    assert result["params_max_abs_diff"] == 0 and len(result["params_sha256"]) == 1
    assert result["hosts"] == ["fbemu-" + result["emulation"]["cluster"] + f"-n{i}" for i in range(2)]
    assert result["link_rate_gbit_s"] == 3.0


@pytest.mark.slow
def test_halo_across_namespaces_matches_one_rank(clean_host, tmp_path):
    result = run_emulated(
        tmp_path, "--benchmark", "halo", "--grid", "24", "--iters", "5", "--warmup", "1", "--link-rate", "1gbit"
    )
    assert result["status"] == "ok" and result["correct"]
    assert result["checksum"] == result["reference_checksum"]
    one = tmp_path / "one"
    proc = fabric_bench(
        "run",
        "--benchmark",
        "halo",
        "--ranks",
        "1",
        "--grid",
        "24",
        "--iters",
        "5",
        "--warmup",
        "1",
        "--results",
        str(one),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(next(one.glob("*/result.json")).read_text())["checksum"] == result["checksum"]


@pytest.mark.slow
def test_emulate_up_is_used_by_runs_and_leftovers_are_refused(clean_host, tmp_path):
    up = fabric_bench("emulate", "up", "--nodes", "2", "--link-rate", "2gbit", "--name", "fbtest")
    assert up.returncode == 0, up.stderr
    try:
        status = json.loads(fabric_bench("emulate", "status", "--json").stdout)
        assert [(s["nodes"], s["leftover"]) for s in status if s["name"] == "fbtest"] == [(2, False)]
        result = run_emulated(tmp_path, "--benchmark", "halo", "--grid", "8", "--iters", "2", "--link-rate", "2gbit")
        assert result["status"] == "ok" and result["emulation"]["cluster"] == "fbtest"
        assert "fbemu-fbtest-n0" in emulate.namespaces()  # the persistent cluster stays up
    finally:
        assert fabric_bench("emulate", "down", "fbtest").returncode == 0
    # a namespace nobody owns, as a crashed run leaves it
    subprocess.run(["ip", "netns", "add", "fbemu-crashed-n0"], check=True)
    refused = fabric_bench(
        "run", "--benchmark", "halo", "--launcher", "emulated", "--nodes", "2", "--results", str(tmp_path / "refused")
    )
    assert refused.returncode == 2 and "emulate down --all" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "refused").exists()
    assert "crashed: unknown origin" in fabric_bench("emulate", "status").stdout
    assert fabric_bench("emulate", "down", "crashed").returncode == 0  # not --all: others may be running
    assert not [ns for ns in emulate.namespaces() if "crashed" in ns or "fbtest" in ns]


@pytest.mark.slow
def test_emulate_list_shows_the_nodes_that_are_up_with_their_links(clean_host):
    """`emulate list` after `emulate up`: one line per cluster, one per node (namespace, address,
    link, planted faults); after `emulate down`, none of them."""
    up = fabric_bench(
        "emulate",
        "up",
        "--nodes",
        "3",
        "--link",
        "300mbit",
        "--link",
        "n0-n2=75mbit",
        "--slow",
        "n1",
        "--name",
        "fbtest",
    )
    assert up.returncode == 0, up.stderr
    try:
        listed = fabric_bench("emulate", "list")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        start = lines.index("fbtest: 3 nodes, links 300 Mbit/s; no Slurm (runs: --launcher emulated)")
        assert [" ".join(line.split()) for line in lines[start + 1 : start + 4]] == [
            f"n0 fbemu-fbtest-n0 {emulate.SUBNET}.1 link 300 Mbit/s (path to n2 75 Mbit/s)",
            f"n1 fbemu-fbtest-n1 {emulate.SUBNET}.2 link 300 Mbit/s (sends at 75 Mbit/s)",
            f"n2 fbemu-fbtest-n2 {emulate.SUBNET}.3 link 300 Mbit/s (path to n0 75 Mbit/s)",
        ]
        data = json.loads(fabric_bench("emulate", "list", "--json").stdout)
        (mine,) = [c for c in data if c["name"] == "fbtest"]
        assert [n["namespace"] for n in mine["nodes"]] == [f"fbemu-fbtest-n{i}" for i in range(3)]
    finally:
        assert fabric_bench("emulate", "down", "fbtest").returncode == 0
    assert "fbtest" not in fabric_bench("emulate", "list").stdout
