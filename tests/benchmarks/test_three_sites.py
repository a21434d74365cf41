"""The three-site rehearsal (benchmarks/three_sites.py): two sites publish signed results to a real
registry, a third pulls, verifies and reports across them; the page opens in Chromium with the
comparison table first; a revoked key's and a tampered artifact are refused in one line each; no
process is left."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers import local_registry
from tests.conftest import REPO, alive, need

pytestmark = pytest.mark.slow


def test_three_sites_share_results_and_refuse_the_forged_ones() -> None:
    need(local_registry.available(), "docker-registry not installed (scripts/setup.sh --test installs it)")
    need(shutil.which("mpirun") is not None, "Open MPI (mpirun) is needed")
    need(shutil.which("chromium") is not None, "chromium not installed (Debian package `chromium`)")
    # A's allreduce once, as B's: six (the script's default) make A a baseline, which nothing here reads
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/three_sites.py"), "--allreduce-runs", "1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    text = out.stdout
    print(text[text.find("phase timings:") :])  # where the time went, for a slow CI run
    assert out.returncode == 0, text[-4000:] + out.stderr[-2000:]
    registry = re.search(r"docker-registry pid (\d+)", text)
    browser = re.search(r"chromium pid (\d+): the page opens with the comparison table$", text, re.M)
    assert registry and browser, text[-3000:]
    assert alive([int(registry.group(1)), int(browser.group(1))]) == set()
    assert "processes of this run left: none" in text
    # A and B published, C pulled both; the allreduce side by side, the training apart and why
    assert re.search(r"^   published \d+ results of site site-a as ", text, re.M)
    assert re.search(r"^   published \d+ results of site site-b as ", text, re.M)
    assert re.search(r"^   across sites: allreduce · .* \(site-a, site-b\)$", text, re.M)
    assert "page says: Not compared with site-a: site-b: benchmark version unknown at site-b" in text
    revoked = re.search(r"^   site-r: (.*)$", text, re.M)
    tampered = re.search(r"^   tampered: (.*)$", text, re.M)
    assert revoked and "revoked" in revoked.group(1) and "refused" in revoked.group(1)
    assert tampered and "does not verify" in tampered.group(1) and "refused" in tampered.group(1)
    total = re.search(r"^\s+([\d.]+) s  in all$", text, re.M)
    assert total and float(total.group(1)) < 600
    work = re.search(r"work folder (\S+) removed", text)
    assert work and not Path(work.group(1)).exists()
