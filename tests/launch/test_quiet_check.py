"""Is this host quiet? (launch.disturbance.quiet): a planted hog outside the checking process is
named; the per-node reports of an srun step are read, junk and all; a failed srun is 'not checked'."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from launch.disturbance.quiet import REPORT_PREFIX, busy_lines, check_nodes, parse_reports, sample_here
from tests.conftest import REPO

HOG = "import time\nwhile True:\n    pass\n"


def test_a_hog_outside_the_checking_process_makes_the_host_busy_and_is_named(tmp_path):
    """The hog is started by a shell that exits at once: it is nobody's child here, as another
    user's job would be."""
    marker = tmp_path / "hog.py"
    marker.write_text(HOG)
    started = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' '{marker}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    hog = int(started.stdout.strip())
    try:
        time.sleep(0.3)
        report = sample_here(2.0)
    finally:
        os.kill(hog, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{hog}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{hog}") or open(f"/proc/{hog}/stat").read().split()[2] == "Z"
    assert report["verdict"] == "busy" and report["seconds"] >= 1.5
    top = report["signals"]["cpu"]["top"]
    assert top and top[0]["cores"] >= 0.5, top  # the hog, one core (the busiest on this host)
    (line,) = busy_lines([report])
    assert line.startswith(f"{report['host']} is busy: other processes used ") and "during the quiet check" in line


def test_reports_are_read_from_an_srun_step_s_output_and_junk_is_skipped():
    quiet = {"host": "n1", "verdict": "quiet", "causes": []}
    busy = {"host": "n0", "verdict": "busy", "causes": ["other processes used 0.91 of a core during the quiet check"]}
    text = "\n".join(
        [
            "srun: job 7 queued",
            REPORT_PREFIX + json.dumps(quiet),
            REPORT_PREFIX + "{not json",
            REPORT_PREFIX + json.dumps([1, 2]),
            REPORT_PREFIX + json.dumps(busy),
        ]
    )
    assert parse_reports(text) == [quiet, busy]
    assert busy_lines(parse_reports(text)) == ["n0 is busy: other processes used 0.91 of a core during the quiet check"]


def test_the_module_prints_one_report_and_a_failed_srun_is_not_checked():
    proc = subprocess.run(
        [sys.executable, "-m", "launch.disturbance.quiet", "0.6"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    (report,) = parse_reports(proc.stdout)
    assert proc.returncode == 0 and report["verdict"] in ("quiet", "busy") and report["host"] == os.uname().nodename
    bad = subprocess.run(
        [sys.executable, "-m", "launch.disturbance.quiet", "soon"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    (missing,) = check_nodes(["/nonexistent/srun", "--nodes=2"], 0.5)
    assert missing["verdict"] == "not checked" and "/nonexistent/srun" in missing["why"]
    (failed,) = check_nodes(["false"], 0.5)
    assert failed == {"host": "(slurm nodes)", "verdict": "not checked", "why": "exit 1: no report"}
