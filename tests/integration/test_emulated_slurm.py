"""An emulated cluster under real Slurm (issue 31): `emulate up --slurm` starts a slurmd in
each node's network namespace; a sweep's allreduce points run as srun --mpi=pmix jobs whose
ranks sit in different namespaces and exchange over the shaped links, and so do DDP's and
Horovod's training ranks; `locate` names a
planted bad link, a planted slow node, and nothing on a healthy cluster. After each
cluster: every daemon and rank gone (by pid), every namespace removed."""

import json
import secrets
import subprocess
import time
from contextlib import contextmanager

import pytest

from launch.disturbance.judge import FOREIGN_BYTES_LIMIT
from launch.fleet import emulate
from launch.fleet.emulate import slurm_nodes
from tests.conftest import REPO, VENV_BIN, alive, fabric_bench, need

pytestmark = pytest.mark.slow
RATE_BIT_S = 300e6
NODES = 4
SIZE_BYTES = 4 * 2**20  # the allreduce points' one message size (test-only experiments: experiment())


def possible():
    import os
    import shutil

    need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated clusters need root and tc")
    need(slurm_nodes.available(), "Slurm is not installed (apt-get install slurm-wlm; make setup-test)")


@contextmanager
def cluster(*planted: str, nodes: int = NODES, link_bit_s: float = RATE_BIT_S):
    """`emulate up --slurm` with the planted faults, every link shaped to `link_bit_s`; yields (name,
    client env, daemon pids); afterwards `emulate down`, and checks that nothing of it is left."""
    possible()
    name = f"ts{secrets.token_hex(3)}"
    rate = f"{link_bit_s / 1e6:g}mbit"
    up = fabric_bench(
        "emulate", "up", "--nodes", str(nodes), "--link", rate, *planted, "--slurm", "--name", name, timeout=120
    )
    assert up.returncode == 0, up.stdout + up.stderr
    pids = slurm_nodes.daemon_pids(name)
    try:
        assert set(pids) == {"slurmctld", *(f"n{i}" for i in range(nodes))} and alive(pids.values()) == set(
            pids.values()
        )
        yield name, slurm_nodes.client_env(name), pids
    finally:
        down = fabric_bench("emulate", "down", name, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not alive(pids.values()), f"Slurm daemons left: {alive(pids.values())}"
    assert not [ns for ns in emulate.namespaces() if emulate.cluster_of(ns) == name]
    assert slurm_nodes.HOST_IF not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.fixture(scope="class")
def shared_cluster(request):
    """One healthy cluster of the class's NODES for the tests of that class, which only use it: up
    once, and checked once after it goes (every daemon and rank gone, every namespace removed)."""
    with cluster(nodes=request.cls.NODES) as up:
        yield up


def gone(pids: set[int], within_s: float = 10) -> bool:
    """No pid of `pids` running within `within_s` (Slurm ends a step's processes as the step ends)."""
    deadline = time.monotonic() + within_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not alive(pids)


def rank_pids(directory) -> set[int]:
    pids = set()
    for path in directory.rglob("rank-*.jsonl"):
        for line in path.read_text().splitlines():
            pids.add(json.loads(line)["pid"])
    return pids


def experiment(tmp_path, *changes: tuple[str, str], seconds_per_size: float | None = 1.0) -> str:
    """experiments/emulated-slurm.experiment.toml with one message size, SIZE_BYTES, measured for
    `seconds_per_size` (None: the bench's 5 s), and `changes` (line, new line), written into
    tmp_path. A point's cost is its bytes over the shaped links (each size up to that budget in
    place, as much out of place and for the ping-pong: 4 s a point at 1 s, 13 s at 5 s): one size,
    large enough for the link's rate to show, is what the assertions read."""
    text = (REPO / "experiments/emulated-slurm.experiment.toml").read_text()
    budget = f"\nmax_seconds_per_size = {seconds_per_size}" if seconds_per_size else ""
    one_size = (
        ("min_bytes = 1048576", f"min_bytes = {SIZE_BYTES}"),
        ("max_bytes = 16777216", f"max_bytes = {SIZE_BYTES}{budget}"),
    )
    for line, new in (*one_size, *changes):
        assert line in text, line
        text = text.replace(line, new)
    path = tmp_path / "test.experiment.toml"
    path.write_text(text)
    return str(path)


def locate(env, out, *more: str) -> dict:
    proc = fabric_bench(
        "locate", "--interface", "fbemu0", "--bytes", str(2 * 2**20), "--out", str(out), *more, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((out / "locate.json").read_text())


def test_a_sweep_and_ddp_cross_the_shaped_links_and_locate_names_nothing_on_a_healthy_cluster(tmp_path):
    with cluster() as (name, env, _):
        site = tmp_path / "site.toml"
        init = fabric_bench("site", "init", "--emulated", name, "-o", str(site), env=env)
        assert init.returncode == 0, init.stderr
        assert 'interface = "fbemu0"' in site.read_text() and 'launcher = "srun"' in site.read_text()
        before = slurm_nodes.node_bytes(emulate.cluster_named(name))
        sweep = fabric_bench(
            "sweep",
            experiment(tmp_path),  # the shipped experiment's points (1, 2 and 4 nodes) at one size
            "--site",
            str(site),
            "--dir",
            str(tmp_path / "sweep"),
            "--remeasure-disturbed",
            "0",
            env=env,
            timeout=900,
        )
        after = slurm_nodes.node_bytes(emulate.cluster_named(name))
        assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-2000:]
        summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
        assert summary["ok"] == summary["ran"] == 3
        # every node was checked before the runs, each by a task of its own (one srun step)
        assert [r["host"] for r in summary["quiet_check"]] == ["n0", "n1", "n2", "n3"], summary["quiet_check"]
        four = [json.loads((tmp_path / "sweep" / row["result"]).read_text()) for row in summary["runs"]]
        four = next(r for r in four if r["world_size"] == 4)
        # a Slurm job whose step's ranks sat on the four emulated nodes, over TCP on fbemu0
        assert four["slurm"]["rank_hosts"] == ["n0", "n1", "n2", "n3"] and four["slurm"]["nodes"] == "n[0-3]"
        assert four["slurm"]["steps"] == [f"{four['slurm']['job_id']}.0"]
        assert four["transport"]["observed"]["mpi"]["btl"] == ["tcp"]
        assert four["env"]["OMPI_MCA_btl_tcp_if_include"] == "fbemu0"
        # every node's shaped interface carried at least the largest message; and the busbw
        # cannot exceed the shaped rate (plus tbf's 3 ms burst): the traffic crossed the tbf
        assert [s["bytes"] for s in four["sizes"]] == [SIZE_BYTES]
        largest = max(s["bytes"] for s in four["sizes"])
        assert all(after[n]["tx_bytes"] - before[n]["tx_bytes"] > largest for n in after), (before, after)
        assert 0 < four["peak_busbw_gbit_s"] * 1e9 < 1.15 * RATE_BIT_S
        # Horovod: its MPI controller, under srun --mpi=pmix. The catalog's smallest model: its
        # gradients (10 MB a step, resnet18's 45 MB: 1.2 s) cross the 300 Mbit/s link
        for engine in ("ddp", "horovod"):
            train = fabric_bench(
                "run",
                "--site",
                str(site),
                "--fabric",
                "ethernet",
                "--engine",
                engine,
                "--model",
                "mobilenet_v3_small",
                "--image-size",
                "32",
                "--batch-size",
                "8",
                "--warmup",
                "1",
                "--iters",
                "2",
                "--batches-per-iter",
                "2",
                "--nodes",
                "2",
                "--ranks",
                "2",
                "--runtime",
                "host",
                "--results",
                str(tmp_path / engine),
                env=env,
                timeout=600,
            )
            assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-2000:]
            record = json.loads(next((tmp_path / engine).glob("*/result.json")).read_text())
            assert record["status"] == "ok" and record["engine"] == engine, record.get("reason")
            # the two ranks on two nodes ended with identical weights: the gradients crossed fbemu0
            assert record["params_max_abs_diff"] == 0.0 and record["slurm"]["rank_hosts"] == ["n0", "n1"]
            assert record["env"]["OMPI_MCA_btl_tcp_if_include"] == "fbemu0"
        # the default quiet check: with 1 s, one node of four reported in a quiet run (15:40, 2026-12-06)
        found = locate(env, tmp_path / "locate")
        ranks = rank_pids(tmp_path)
    assert found["slow_nodes"] == [] and found["slow_links"] == [] and found["failed_pairs"] == [], found
    assert len(found["pairs"]) == 6 and found["rounds"] == 3
    # each node checked first by a task of its own in the allocation (a busy node is told from a slow one)
    assert [r["host"] for r in found["quiet_check"]] == ["n0", "n1", "n2", "n3"], found["quiet_check"]
    assert all(
        p["step_id"].startswith(f"{found['job_id']}.") and sorted(p["hosts"]) == sorted([p["a"], p["b"]])
        for p in found["pairs"]
    )
    assert (tmp_path / "locate" / "heatmap.png").stat().st_size > 1000
    assert "<table>" in (tmp_path / "locate" / "heatmap.html").read_text()
    assert ranks and not alive(ranks)


def test_locate_names_a_degraded_link_and_nothing_else(tmp_path):
    with cluster("--link", "n1-n3=75mbit") as (_, env, _pids):
        found = locate(env, tmp_path, "--quiet-check", "0")  # locate's quiet check: the first test
    assert found["slow_links"] == [["n1", "n3"]] and found["slow_nodes"] == [], found
    slow = next(p for p in found["pairs"] if (p["a"], p["b"]) == ("n1", "n3"))
    assert slow["best_gbit_s"] < 0.1 and slow["remeasured_gbit_s"] is not None
    assert not alive(rank_pids(tmp_path))


def test_locate_screens_six_nodes_and_names_a_slow_node_and_nothing_else(tmp_path):
    """The screen (ring and opposite pairs, then all pairs among the suspects) on 6 nodes: fewer
    steps than all 15 pairs, the same verdict."""
    with cluster("--slow", "n2", nodes=6) as (_, env, _pids):
        found = locate(env, tmp_path, "--pattern", "screen", "--quiet-check", "0")
    assert found["pattern"] == "screen"
    assert found["slow_nodes"] == ["n2"] and found["slow_links"] == [], found
    measured = {(p["a"], p["b"]) for p in found["pairs"]}
    assert len(measured) < 15 and {("n1", "n2"), ("n2", "n3"), ("n2", "n5")} <= measured
    assert not alive(rank_pids(tmp_path))


class TestTwoHealthyNodes:
    """The tests that only use a healthy 2-node cluster share one."""

    NODES = 2

    def test_a_second_slurm_cluster_and_bad_faults_are_refused_in_one_line(self, shared_cluster):
        second = fabric_bench("emulate", "up", "--nodes", "2", "--slurm", "--name", "tsother", timeout=60)
        assert second.returncode == 2 and "runs already" in second.stderr and len(second.stderr.splitlines()) == 1
        bad = fabric_bench("emulate", "up", "--nodes", "2", "--link", "300mbit", "--link", "n5=1gbit", timeout=60)
        assert bad.returncode == 2 and "n0..n1" in bad.stderr and "Traceback" not in bad.stderr

    def test_a_node_s_lookup_of_a_peer_address_ends_at_once(self, shared_cluster):
        """No name server is reachable from a node: a reverse lookup (c10d makes one for each peer it
        connects) fails at once instead of waiting out the resolver's 10 s, twice a training run."""
        name, _, _ = shared_cluster
        node = emulate.cluster_named(name).node(0)
        started = time.monotonic()
        subprocess.run(["nsenter", f"--net=/run/netns/{node}", "getent", "hosts", f"{emulate.SUBNET}.2"], timeout=30)
        assert time.monotonic() - started < 2.0

    def test_a_sweep_as_one_batch_job_runs_its_points_as_steps_across_the_nodes(self, shared_cluster, tmp_path):
        two_nodes = experiment(
            tmp_path, ("nodes = [2, 4]", "nodes = [2]"), ('launcher = "srun"', 'launcher = "sbatch"')
        )
        name, env, _ = shared_cluster
        site = tmp_path / "site.toml"
        assert fabric_bench("site", "init", "--emulated", name, "-o", str(site), env=env).returncode == 0
        sweep = fabric_bench(
            "sweep",
            two_nodes,
            "--site",
            str(site),
            "--dir",
            str(tmp_path / "sweep"),
            "--one-job",
            "--remeasure-disturbed",
            "0",
            "--quiet-check",
            "1",  # inside the batch job; its length is not what this test reads
            env=env,
            timeout=600,
        )
        ranks = rank_pids(tmp_path)
        assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-2000:]
        summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
        results = [json.loads((tmp_path / "sweep" / row["result"]).read_text()) for row in summary["runs"]]
        assert summary["ok"] == summary["ran"] == 2 and len({r["slurm"]["job_id"] for r in results}) == 1
        two = next(r for r in results if r["world_size"] == 2)
        job = two["slurm"]["job_id"]
        assert two["slurm"]["rank_hosts"] == ["n0", "n1"] and two["slurm"]["steps"][0].startswith(f"{job}.")
        assert (
            two["transport"]["observed"]["mpi"]["btl"] == ["tcp"]
            and [s["bytes"] for s in two["sizes"]] == [SIZE_BYTES]
            and 0 < two["peak_busbw_gbit_s"] * 1e9 < 1.15 * RATE_BIT_S
        )
        assert gone(ranks)  # with their jobs, the cluster still up


class TestThreeHealthyNodes:
    """The tests that use a healthy 3-node cluster share one; the failing node's test takes n1 off
    the network, so it runs last."""

    NODES = 3

    def test_in_the_apptainer_image_srun_pmix_crosses_the_nodes(self, shared_cluster, tmp_path, cpu_ethernet_image):
        """srun --mpi=pmix apptainer exec IMG: the image's Open MPI on three emulated nodes (locate's
        steps and an allreduce run), its ranks on n0..n2 over TCP on fbemu0."""
        image = str(cpu_ethernet_image.image)
        name, env, _ = shared_cluster
        site = tmp_path / "site.toml"
        assert fabric_bench("site", "init", "--emulated", name, "-o", str(site), env=env).returncode == 0
        run = fabric_bench(
            "run",
            "--site",
            str(site),
            "--benchmark",
            "allreduce",
            "--min-bytes",
            "1048576",
            "--max-bytes",
            "1048576",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--max-seconds-per-size",
            "1",
            "--nodes",
            "3",
            "--ranks",
            "3",
            "--fabric",
            "ethernet",
            "--runtime",
            "apptainer",
            "--image",
            image,
            "--results",
            str(tmp_path / "run"),
            env=env,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        proc = fabric_bench(
            "locate",
            "--interface",
            "fbemu0",
            "--bytes",
            str(2**20),
            "--image",
            image,
            "--quiet-check",
            "0",  # host Python, not the image's: the first test asserts it
            "--out",
            str(tmp_path / "locate"),
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        found = json.loads((tmp_path / "locate" / "locate.json").read_text())
        ranks = rank_pids(tmp_path)
        r = json.loads(next((tmp_path / "run").glob("*/result.json")).read_text())
        assert r["status"] == "ok" and r["argv"][0] == "srun" and "apptainer" in r["argv"]
        assert r["argv"][1:3] == [f"--job-name=fabric-bench-{r['run_id']}", "--mpi=pmix"]
        # ranks in the image, each node sampled on its own by the host's Python beside them
        assert sorted(r["disturbance"]["nodes"]) == ["n0", "n1", "n2"], r["disturbance"]["sampler"]
        assert r["slurm"]["rank_hosts"] == ["n0", "n1", "n2"] and r["transport"]["observed"]["mpi"]["btl"] == ["tcp"]
        assert r["slurm"]["job_id"] and r["slurm"]["steps"] == [f"{r['slurm']['job_id']}.0"]
        assert len(found["pairs"]) == 3 and not found["failed_pairs"]
        assert all(sorted(p["hosts"]) == sorted([p["a"], p["b"]]) for p in found["pairs"])
        assert gone(ranks)  # with their jobs, the cluster still up

    def test_a_point_whose_node_fails_runs_once_more_without_it(self, shared_cluster, tmp_path):
        """n1 drops off the network while a 2-node point runs on n0,n1: Slurm declares it failed,
        srun says so, and the sweep runs the point again with --exclude=n1 (both runs kept)."""
        # one size, up to 40 samples in 2 s a form: ~6 s of measuring after the ranks start (the
        # link goes down ~3 s after the job does), and as long again for the run without n1
        long = experiment(
            tmp_path, ("nodes = [2, 4]", "nodes = [2]"), ("iters = 3", "iters = 40"), seconds_per_size=2.0
        )
        name, env, _ = shared_cluster
        site = tmp_path / "site.toml"
        assert fabric_bench("site", "init", "--emulated", name, "-o", str(site), env=env).returncode == 0
        sweep = subprocess.Popen(
            [
                str(VENV_BIN / "fabric-bench"),
                "sweep",
                long,
                "--site",
                str(site),
                "--dir",
                str(tmp_path / "sweep"),
                "--remeasure-disturbed",
                "0",
                "--quiet-check",
                "0",  # the sweep's quiet check: the first test
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # wait for the 2-node job on n0,n1
                queue = subprocess.run(
                    ["squeue", "--noheader", "--format=%D %N %T"], env=env, capture_output=True, text=True
                ).stdout.split()
                if queue[:3] == ["2", "n[0-1]", "RUNNING"]:
                    break
                time.sleep(0.5)
            else:
                pytest.fail("the 2-node point never ran on n[0-1]")
            time.sleep(3)
            subprocess.run(
                ["ip", "-n", emulate.cluster_named(name).node(1), "link", "set", "fbemu0", "down"], check=True
            )
            output, _ = sweep.communicate(timeout=600)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
        ranks = rank_pids(tmp_path)
        summary = json.loads((tmp_path / "sweep" / "summary.json").read_text())
        two = next(row for row in summary["runs"] if not row["baseline"])
        state = json.loads((tmp_path / "sweep" / "index.json").read_text())
        runs = next(p["runs"] for p in state["points"].values() if "n2x1" in p["label"])
        assert len(runs) == 2, output[-3000:]
        first = json.loads((tmp_path / "sweep" / "runs" / runs[0] / "result.json").read_text())
        second = json.loads((tmp_path / "sweep" / "runs" / runs[1] / "result.json").read_text())
        assert first["status"] != "ok" and second["status"] == "ok", output[-3000:]
        assert second["retry_of"] == {"run_id": runs[0], "failed_nodes": ["n1"]}
        assert "--exclude=n1" in second["argv"] and second["slurm"]["rank_hosts"] == ["n0", "n2"]
        assert two["result"].endswith(f"{runs[1]}/result.json") or runs[1] in two["result"]
        assert gone(ranks)  # with their jobs, the cluster still up


def test_every_node_of_a_slurm_run_is_sampled_on_its_own_and_a_rate_limited_node_is_named(tmp_path):
    """Per-node sampling (launch.disturbance.nodes): under srun and under sbatch, one sampler task
    per node attached to the ranks' job; each node judged on its own /proc and interface; node
    n1, shaped to a quarter of the others' rate, named by the link signal and nothing else
    named for it; the benchmark's own traffic not taken for foreign; no sampler left after."""
    # The link signal reads the shapers' rates, not the traffic: links of 1200 Mbit/s (n1 at 300)
    # carry the runs 4 x faster than 300 (n1 at 75). Half a MiB, 3 samples: a few seconds, ~175 MB
    # of the run's own (a quarter of it, the foreign limit, still above FOREIGN_BYTES_LIMIT), and a
    # batch job seen ending within a second (launch.fleet.sbatch_wait)
    link_bit_s = 4 * RATE_BIT_S
    with cluster("--slow", "n1", nodes=2, link_bit_s=link_bit_s) as (name, env, _):
        site = tmp_path / "site.toml"
        assert fabric_bench("site", "init", "--emulated", name, "-o", str(site), env=env).returncode == 0
        for launcher in ("srun", "sbatch"):
            out = tmp_path / launcher
            proc = fabric_bench(
                "run", "--site", str(site), "--launcher", launcher, "--fabric", "ethernet",
                "--benchmark", "allreduce", "--min-bytes", str(2**19), "--max-bytes", str(2**19),
                "--iters", "3", "--warmup", "1", "--nodes", "2", "--ranks", "2", "--runtime", "host",
                "--results", str(out), env=env, timeout=600,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
            run_dir = next(out.glob("*/result.json")).parent
            record = json.loads((run_dir / "result.json").read_text())["disturbance"]
            assert set(record["nodes"]) == {"n0", "n1"} and record["sampler"]["per_node"] is True, record
            link = record["signals"]["link"]
            assert link["rate_limited"] == ["n1"] and link["nodes"]["n1"]["rate_bit_s"] == link_bit_s / 4, link
            assert "a rate-limited node: n1's egress on fbemu0" in proc.stdout.replace("\n", " ")
            for host, node in record["nodes"].items():
                assert node["sampler"]["host"] == host and node["window"]["snapshots"] >= 2, node
                traffic = node["signals"]["traffic"]  # a limit of the run's own bytes, not the floor
                assert traffic["verdict"] == "clean" and traffic["limit_bytes"] > FOREIGN_BYTES_LIMIT, traffic
            sampler_pids = [json.loads(p.read_text())["pid"] for p in (run_dir / "ranks").glob("node-*.json")]
            assert len(sampler_pids) == 2 and not alive(sampler_pids)
        ranks = rank_pids(tmp_path)
    assert ranks and not alive(ranks)
    left = subprocess.run(["pgrep", "-f", "launch.disturbance.nodes"], capture_output=True, text=True).stdout
    assert left.strip() == ""
