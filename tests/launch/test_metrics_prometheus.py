"""A real Prometheus scrapes a real node_exporter's textfile collector over the files `fabric-bench
baseline --metrics-dir` writes, and the figures, the verdict and the documented alert rules
(docs/baselines.md) come back through its HTTP API. Both are Debian's packages (scripts/setup.sh
--test installs them), each on a free localhost port with its own data, stopped by pid.

The store holds copies of RECORDED real runs (tests/data/baseline, SOURCE.md there)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import REPO, alive, fabric_bench, need
from tests.launch.test_baseline import DATA, history, indexed, write

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def documented_rules() -> str:
    """The alert rules of docs/baselines.md: its one ```yaml block that starts with `groups:`."""
    blocks = re.findall(r"^```yaml\n(groups:.*?)^```", (REPO / "docs" / "baselines.md").read_text(), re.M | re.S)
    assert len(blocks) == 1
    return blocks[0]


class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def query(self, expr: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, expr: str, seconds: float = 120) -> list[dict]:
        deadline = time.monotonic() + seconds
        while True:
            try:
                found = self.query(expr)
            except OSError:  # not listening yet
                found = []
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.5)


@pytest.fixture
def scraped(tmp_path):
    """node_exporter (textfile collector only) over tmp_path/textfile, Prometheus scraping it every
    second with the documented rules; both stopped by pid afterwards, and none left."""
    need(NODE_EXPORTER is not None and PROMETHEUS is not None, "prometheus, prometheus-node-exporter not installed")
    assert NODE_EXPORTER is not None and PROMETHEUS is not None
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    exporter_port, prometheus_port = free_port(), free_port()
    (tmp_path / "rules.yml").write_text(documented_rules())
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n  - job_name: node\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    started = []
    with open(tmp_path / "exporter.log", "w") as exporter_log, open(tmp_path / "prometheus.log", "w") as log:
        for argv, out in (
            (
                [
                    NODE_EXPORTER,
                    f"--web.listen-address=127.0.0.1:{exporter_port}",
                    "--collector.disable-defaults",
                    "--collector.textfile",
                    f"--collector.textfile.directory={textfiles}",
                ],
                exporter_log,
            ),
            (
                [
                    PROMETHEUS,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                ],
                log,
            ),
        ):
            started.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path))
    try:
        yield textfiles, Prometheus(f"http://127.0.0.1:{prometheus_port}")
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        assert alive([p.pid for p in started]) == set()


def test_prometheus_scrapes_the_figures_and_verdicts_and_the_documented_alert_fires(tmp_path, scraped):
    textfiles, prometheus = scraped
    halo = json.loads((DATA / "halo-g32-n2.result.json").read_text())  # one recorded halo run: disturbed
    env = indexed(tmp_path / "store", history(0.5))
    done = fabric_bench("results", "index", str(write(tmp_path / "halo", [halo])), env=env)
    assert done.returncode == 0, done.stderr
    shown = fabric_bench("baseline", "--json", "--metrics-dir", str(textfiles), env=env)
    assert shown.returncode == 0, shown.stderr
    halo_record, busbw_record = sorted(json.loads(shown.stdout), key=lambda r: r["key"]["benchmark"] != "halo")
    assert sorted(p.name for p in textfiles.iterdir()) == sorted(
        f"fabricbench_{r['key_id']}.prom" for r in (halo_record, busbw_record)
    )

    slow = prometheus.wait_for('fabricbench_verdict{verdict="slow"} == 1')
    assert [s["metric"]["key"] for s in slow] == [busbw_record["key_id"]], (tmp_path / "prometheus.log").read_text()[
        -2000:
    ]
    assert slow[0]["metric"]["fabric"] == "ethernet" and slow[0]["metric"]["ranks"] == "2"
    [busbw] = prometheus.query("fabricbench_busbw_bytes_per_second")
    assert float(busbw["value"][1]) == pytest.approx(busbw_record["figure"]["value"] * 1e9 / 8, rel=1e-9)
    assert "stack_digest" not in busbw["metric"]  # the stack, image and job are the info metric's alone
    [median] = prometheus.query('fabricbench_busbw_baseline_bytes_per_second{statistic="median"}')
    assert float(median["value"][1]) == pytest.approx(busbw_record["baseline"]["median"] * 1e9 / 8, rel=1e-9)
    [seconds] = prometheus.query("fabricbench_time_per_iter_seconds")
    assert float(seconds["value"][1]) == pytest.approx(halo["time_per_iter_mean_s"], rel=1e-5)
    assert prometheus.query(f'fabricbench_verdict{{key="{halo_record["key_id"]}",verdict="disturbed"}} == 1')
    info = prometheus.query("fabricbench_run_info")
    assert {i["metric"]["stack_digest"] for i in info} == {busbw_record["run"]["stack"]}
    assert [float(e["value"][1]) for e in prometheus.query("node_textfile_scrape_error")] == [0.0]
    assert len(prometheus.query('{__name__=~"fabricbench_.*"}')) <= 2 * 200

    firing = prometheus.wait_for('ALERTS{alertname="FabricBenchRunSlow",alertstate="firing"}', 60)
    assert [a["metric"]["key"] for a in firing] == [busbw_record["key_id"]]
    assert prometheus.query('ALERTS{alertname="FabricBenchMetricsStale"}') == []
    stale = prometheus.query('time() - node_textfile_mtime_seconds{file=~".*fabricbench_[0-9a-f]+[.]prom"}')
    assert len(stale) == 2 and all(0 <= float(s["value"][1]) < 600 for s in stale)


def test_the_documented_alert_rules_pass_promtool(tmp_path):
    promtool = shutil.which("promtool")
    need(promtool is not None, "promtool not installed (Debian's prometheus package)")
    (tmp_path / "rules.yml").write_text(documented_rules())
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout
