"""scripts/test-suite.sh (`make test`): the image builds in the background beside the unit tests,
and a failed build fails the run with its log's end shown, the slow tests that need no image
still run, and both halves' durations land in one file."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO, VENV_BIN, alive

pytestmark = pytest.mark.slow  # two pytest sessions inside this one (~10 s)
DOCS_TEST = "tests/test_docs.py::test_every_relative_link_reaches_a_file_and_heading"
IMAGE_CASE = "tests/security/test_job_scripts.py::test_an_image_or_hostfile_that_a_tool_would_read_as_an_option_is_refused[image]"


def test_a_failed_background_build_fails_the_run_with_its_log_and_the_rest_still_runs(tmp_path):
    builder = tmp_path / "fabric-bench"  # stands in for the image build: fails as a cold one can
    builder.write_text('#!/bin/sh\necho "$$" > "$(dirname "$0")/pid"\necho "FATAL: planted build failure"\nexit 3\n')
    builder.chmod(0o755)
    durations, phases = tmp_path / "d" / "durations.tsv", tmp_path / "phases.tsv"
    env = {
        **os.environ,
        "VENV": str(VENV_BIN.parent),
        "FABRIC_BENCH": str(builder),
        "TEST_IMAGE": "1",
        "TEST_DURATIONS": str(durations),
        "JOBS": "1",
        # two unit tests (one with a case named "image": no image marker), and image tests the failed
        # build must leave out (they would build for minutes); quoted as on make's command line
        "PYTEST_ARGS": f"{DOCS_TEST} '{IMAGE_CASE}' 'tests/containers/test_image_build.py'",
        "FABRIC_BENCH_PHASE_LOG": str(phases),
        "FABRIC_BENCH_CACHE": str(tmp_path / "cache"),  # its build lock
    }
    proc = subprocess.run(
        [str(REPO / "scripts/test-suite.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "building the cpu-debian image failed (exit 3)" in proc.stderr
    assert "FATAL: planted build failure" in proc.stderr  # the log's end, here
    assert (durations.parent / "test-image-build.log").is_file()
    steps = {row.split("\t")[0].strip(): row.split("\t")[2] for row in phases.read_text().splitlines()}
    assert steps["unit tests (-n 1)"].endswith("exit 0")
    assert steps["image (background)"].endswith("exit 3")
    # none left to run in either lane of the slow tests
    assert steps["slow tests side by side (-n 1)"] == "pytest -m '(slow and not image) and side_by_side': exit 5"
    assert steps["slow tests (one at a time)"] == "pytest -m '(slow and not image) and not side_by_side': exit 5"
    rows = [line.split("\t") for line in durations.read_text().splitlines()[1:]]
    assert sorted((r[3], r[2]) for r in rows) == [(IMAGE_CASE, "-"), (DOCS_TEST, "-")]
    assert not alive({int((tmp_path / "pid").read_text())})
