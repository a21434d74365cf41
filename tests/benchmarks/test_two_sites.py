"""The two-site rehearsal in its small form: A pushes, runs, archives and signs; B pulls by
digest, verifies, replays on its own fabric; B's report says first that the stack is one and the
fabric differs, then the verdict; no registry process and no namespace is left."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers import local_registry
from tests.conftest import REPO, alive, need

pytestmark = pytest.mark.slow


def test_two_sites_small(cpu_ethernet_image):
    need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated sites need root and tc")
    need(local_registry.available(), "docker-registry not installed (scripts/setup.sh --test installs it)")
    # no --work: the script's temporary folder (a registry's and a pulled copy of the image,
    # ~9 GB) is removed at its end. The study is the DDP training alone: A runs it and B replays it
    # (the MPI allreduce beside it adds a run at each site and nothing this test reads)
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/two_sites.py"), "--small", "--benchmarks", "train"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    text = out.stdout
    print(text[text.find("phase timings:") :])  # where the time went, for a slow CI run
    assert out.returncode == 0, text[-4000:] + out.stderr[-2000:]
    pid = int(re.search(r"docker-registry pid (\d+)", text).group(1))
    assert alive([pid]) == set()
    assert "registry pid" in text and "gone; new namespaces left: none" in text
    stack = re.search(r"stack: every run ran on one stack: (sha256:[0-9a-f]{12})… \(SBOM: (\d+) stack components", text)
    assert stack and f"sha256:{cpu_ethernet_image.stack_digest}".startswith(stack.group(1))
    assert int(stack.group(2)) >= 4
    assert "the fabric (emu-eth-1g, emu-eth-5g) is what differs" in text
    # the stack line comes before the verdict
    assert text.index("stack: every run ran on one stack") < text.index("verdict (")
    pulled = re.search(r"ethernet-cpu-debian\.sif: (sha256:[0-9a-f]{16})", text)
    assert pulled and f"sha256:{cpu_ethernet_image.sha256}".startswith(pulled.group(1))
    assert re.search(r"^\s+[\d.]+ s  in all$", text, re.M)
    work = re.search(r"work folder (\S+) removed", text)
    assert work and not Path(work.group(1)).exists()
