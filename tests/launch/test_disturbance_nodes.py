"""Per-node sampling (launch.disturbance.nodes) and the link signal (launch.disturbance.link):
a node sampler on this host writes its file on the stop file and on SIGTERM and leaves no
process; a snapshot survives its file; the recorded files of a real Slurm run with a slow
node (tests/data/node_samplers, SOURCE.md there) are judged node by node, the slow node
named by its shaped rate and nothing else; a degraded pair's htb is not a rate-limited node;
a broken node file reads as not recorded, in words."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.disturbance import judge, link, nodes, sample
from launch.results.result import disturbance_causes, disturbed
from tests.conftest import REPO, alive

DATA = REPO / "tests" / "data" / "node_samplers"


def recorded_run() -> tuple[dict[str, dict], list[dict], dict]:
    run = DATA / "slow-node"
    files = {n: json.loads((run / f"node-{n}.json").read_text()) for n in ("n0", "n1")}
    records = [json.loads(line) for p in sorted(run.glob("rank-*.jsonl")) for line in p.read_text().splitlines()]
    return files, records, json.loads((run / "result.json").read_text())


def test_a_snapshot_survives_its_node_file():
    sampler = sample.Sampler(os.getpid(), interfaces=("lo",))
    first = sampler.take()
    again = nodes.snapshot_from(json.loads(json.dumps(nodes.snapshot_json(first))))
    assert again == first and first.foreign and again.net.keys() == {"lo"}


def node_sampler(record_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "launch.disturbance.nodes", str(record_dir), "lo"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def written(record_dir: Path) -> dict:
    files = list(record_dir.glob("node-*.json"))
    assert len(files) == 1 and not list(record_dir.glob("*.partial"))
    return json.loads(files[0].read_text())


@pytest.mark.parametrize("how", ["stop file", "SIGTERM"])
def test_a_node_sampler_writes_its_file_when_told_to_stop_and_ends(tmp_path, how):
    proc = node_sampler(tmp_path)
    time.sleep(1.6)
    if how == "stop file":
        (tmp_path / nodes.STOP_FILE).touch()
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    data = written(tmp_path)
    assert data["pid"] == proc.pid and data["interface"] == "lo" and len(data["snapshots"]) >= 3
    assert data["cost"]["snapshots"] == len(data["snapshots"]) and data["cost"]["cpu_seconds"] > 0
    # tc read twice where it is installed; otherwise one reason, never a crash
    assert len(data["link"]) == 2 and all(("qdisc" in r) == bool(shutil.which("tc")) for r in data["link"])
    assert not alive([proc.pid])


def test_a_node_sampler_refuses_bad_arguments_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "launch.disturbance.nodes"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("usage:")


def test_the_recorded_slow_node_is_named_by_its_shaped_rate_and_each_node_is_judged_on_its_own():
    files, records, result = recorded_run()
    found = judge.nodes_record(files, records, result, {"snapshots": 3}, "launching-host")
    assert found["verdict"] == "disturbed" and set(found["nodes"]) == {"n0", "n1"}
    assert [c["signal"] for c in found["causes"]] == [judge.LINK], found["causes"]
    words = found["causes"][0]["words"]
    assert "n1's egress on fbemu0 is shaped to 75 Mbit/s (tbf), 25% of the fastest node's 300 Mbit/s" in words
    assert found["signals"][judge.LINK]["rate_limited"] == ["n1"]
    assert found["signals"][judge.LINK]["nodes"]["n1"]["held_back"] > 0
    for name, node in found["nodes"].items():
        # every node's own window, CPU and traffic: the benchmark's own bytes are an upper bound
        assert node["sampler"]["host"] == name and node["window"]["snapshots"] >= 2
        traffic = node["signals"][judge.TRAFFIC]
        assert traffic["verdict"] == "clean" and 0.5 < traffic["bytes_moved"] / traffic["own_bytes_expected"] < 1.0
        assert node["signals"][judge.CPU]["verdict"] in ("clean", "disturbed")
    assert found["sampler"] == {"snapshots": 3, "host": "launching-host", "per_node": True, "not_sampled_hosts": []}
    # the readers see it as any other record: disturbed, the cause in words
    whole = {**result, "disturbance": found}
    assert disturbed(whole) and disturbance_causes(whole) == [words]


def test_a_node_seen_busy_is_named_with_its_node():
    files, records, result = recorded_run()
    run_end = max(r["time_unix"] for r in records if "time_unix" in r)
    busy = json.loads(json.dumps(files["n0"]))
    for snapshot in busy["snapshots"]:  # a process outside the run at one core from the start
        ticks = round((snapshot["time_unix"] - busy["snapshots"][0]["time_unix"]) * sample.TICKS_PER_S)
        snapshot["foreign"].append([999999, 1, "neighbour", ticks])
        snapshot["cpu_busy"][0][1] += ticks
    assert busy["snapshots"][-1]["time_unix"] >= run_end - 1
    found = judge.nodes_record({**files, "n0": busy}, records, result, None, None)
    cpu = [c for c in found["causes"] if c["signal"] == judge.CPU]
    assert [c["node"] for c in cpu] == ["n0"] and cpu[0]["words"].startswith("n0: other processes used")
    assert "neighbour 1.00" in cpu[0]["words"] or "neighbour 0.9" in cpu[0]["words"]


def test_a_broken_or_missing_node_file_reads_as_not_recorded(tmp_path):
    files, records, result = recorded_run()
    (tmp_path / "node-n0.json").write_text("{not json")
    (tmp_path / "node-n1.json").write_text(json.dumps({"host": "n1", "snapshots": [{"time_unix": "x"}]}))
    read = nodes.NodeSamplers(tmp_path, "step", 2, "fbemu0", False).files()
    assert read["n0"]["error"].startswith("node-n0.json:")
    found = judge.nodes_record(read, records, result, None, None)
    assert found["nodes"]["n0"]["verdict"] == found["nodes"]["n1"]["verdict"] == "not recorded"
    assert found["verdict"] == "not recorded" and found["nodes"]["n1"]["why"].startswith("unreadable")
    # a rank host with no file at all is named as not sampled
    only_n1 = judge.nodes_record({"n1": files["n1"]}, records, result, None, None)
    assert only_n1["sampler"]["not_sampled_hosts"] == ["n0"]


def test_a_degraded_pair_is_not_a_rate_limited_node():
    readings = json.loads((DATA / "pair-htb-links.json").read_text())
    links = {n: link.node_link(r) for n, r in readings.items()}
    assert {n: (x["kind"], x["rate_bit_s"]) for n, x in links.items()} == {
        "n0": ("htb", 300_000_000),
        "n1": ("htb", 300_000_000),
    }
    assert link.link_signal(links, "fbemu0")["verdict"] == "clean"


def test_the_negotiated_speed_is_read_in_the_nodes_own_namespace():
    # a real veth pair: one end in a namespace of its own, read there by a process entered into it
    # (as a node sampler is); the host cannot see that end, and a driver without speeds says so
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nsenter"):
        pytest.skip("needs root, ip and nsenter to make a network namespace")
    name = f"fbspd{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(
            ["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", "fbnode0", "netns", name], check=True
        )
        code = "import json; from launch.disturbance import link; print(json.dumps(link.negotiated_speed('fbnode0')))"
        inside = subprocess.run(
            ["nsenter", f"--net=/run/netns/{name}", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        assert json.loads(inside.stdout) == {"speed_mbit": 10000}  # what the veth driver reports
        assert link.negotiated_speed("fbnode0") == {"speed_error": "ethtool ioctl: No such device"}
        assert link.negotiated_speed("lo") == {"speed_error": "ethtool ioctl: Operation not supported"}
        assert link.negotiated_speed("x" * 16)["speed_error"].endswith("is not an interface name")
    finally:
        subprocess.run(["ip", "link", "del", f"{name}a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_a_node_whose_nic_negotiated_a_lower_speed_is_named():
    # no shaper anywhere (mq, as a multi-queue NIC shows); n1's NIC came up at a quarter
    unshaped = {"qdisc": '[{"kind":"mq","root":true,"handle":"0:"}]', "classes": ""}
    readings = {"n0": {**unshaped, "speed_mbit": 100000}, "n1": {**unshaped, "speed_mbit": 25000}}
    links = {n: link.node_link([r, r]) for n, r in readings.items()}
    assert links["n1"] == {"kind": None, "speed_bit_s": 25_000_000_000}
    found = link.link_signal(links, "eth2")
    assert found["verdict"] == "disturbed" and found["rate_limited"] == ["n1"]
    assert link.link_words(found) == (
        "a rate-limited node: n1's egress on eth2 negotiated 25000 Mbit/s, 25% of the fastest node's 100000 Mbit/s"
    )
    # the lower of shaper and speed limits a node: a 10 Gb/s veth shaped to 300 Mbit/s is 300 Mbit/s
    files, _, _ = recorded_run()
    shaped = {n: link.node_link([{**r, "speed_mbit": 10000} for r in files[n]["link"]]) for n in ("n0", "n1")}
    assert link.link_signal(shaped, "fbemu0")["rate_limited"] == ["n1"]
    assert "is shaped to" in link.link_words(link.link_signal(shaped, "fbemu0"))
    # both NICs at the same speed: clean; a driver with no speed and no shaper: not measured, in words
    same = {n: link.node_link([{**unshaped, "speed_mbit": 100000}]) for n in ("n0", "n1")}
    assert link.link_signal(same, "eth2")["verdict"] == "clean"
    unknown = {n: link.node_link([{**unshaped, "speed_error": "the driver reports no speed"}]) for n in ("a", "b")}
    assert link.link_signal(unknown, "eth0")["why"] == "no shaper; link speed: the driver reports no speed"


def test_the_link_signal_needs_two_nodes_and_a_shaper():
    files, _, _ = recorded_run()
    one = {"n1": link.node_link(files["n1"]["link"])}
    assert link.link_signal(one, "fbemu0")["verdict"] == "not measured"
    none = {n: link.node_link([{"qdisc": '[{"kind":"fq_codel","root":true}]', "classes": ""}]) for n in ("a", "b")}
    assert link.link_signal(none, "eth0") == {"verdict": "not measured", "why": "no shaper", "nodes": none}
    unread = {n: link.node_link([{"error": "tc not found"}]) for n in ("a", "b")}
    assert link.link_signal(unread, "eth0")["why"] == "tc not found"
    assert link.shaper({"qdisc": "garbage"}) == {"error": "tc printed no JSON"}
