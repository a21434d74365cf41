"""The CLI's start stays cheap: every `fabric-bench` process (the suite starts hundreds) imports
only what every command needs; a command that needs scipy, matplotlib or the image recipes
imports them when it runs (issue 51: scipy.stats alone was ~0.8 CPU-s of each start)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO, fabric_bench

# Packages no command needs before it runs: statistics, plots, frameworks, image recipes
HEAVY = {"scipy", "matplotlib", "numpy", "torch", "tensorflow", "hpccm", "spython", "PIL", "pandas"}


def imported_at_start(code: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after `code`."""
    proc = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return {name.split(".")[0] for name in proc.stdout.split()}


def test_importing_the_cli_brings_in_no_heavy_package():
    loaded = imported_at_start("import launch.cli.app")
    assert "typer" in loaded and "launch" in loaded  # it did import the CLI
    assert not loaded & HEAVY, sorted(loaded & HEAVY)


def test_a_command_that_needs_scipy_still_gets_it_when_it_runs():
    """The lazy import is there: a confidence interval (Student's t, from scipy) is computed."""
    loaded = imported_at_start(
        "from launch.analysis.aggregate import Estimate\nassert round(Estimate(1.0, 0.25, 4).ci95, 3) == 1.388"
    )
    assert "scipy" in loaded
    helped = fabric_bench("baseline", "--help")
    assert helped.returncode == 0 and "baseline" in helped.stdout
