"""scripts/setup.sh: paths from anywhere, one line per phase, bad cache directories refused.

These run the real script against the suite's own (already set-up) venv, so every
phase finds its inputs unchanged and the script takes seconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, VENV_BIN, need

VENV = VENV_BIN.parent
PHASES = ["system packages", "venv", "horovod wheel", "horovod install"]


def setup(cwd: Path, *options: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "scripts/setup.sh"), *options],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


pytestmark = pytest.mark.slow  # each test re-runs set-up (~4 s together when up to date): not in make test-fast


def test_relative_venv_and_cache_from_another_directory_find_what_is_built(tmp_path):
    cache = Path(os.environ.get("FABRIC_BENCH_CACHE", Path.home() / ".cache/fabric-bench")).resolve()
    need(any(cache.glob("horovod-*/horovod-*.whl")), f"no Horovod wheel cached in {cache} (make setup)")
    elsewhere = VENV.parent  # relative paths are the caller's, not the checkout's
    phase_log = tmp_path / "phases.tsv"
    proc = setup(
        elsewhere,
        VENV=VENV.name,
        FABRIC_BENCH_CACHE=os.path.relpath(cache, elsewhere),
        FABRIC_BENCH_PHASE_LOG=str(phase_log),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for phase in PHASES:  # one line each, with what it did and its seconds
        (line,) = [l for l in lines if l.startswith(f"setup: {phase} ")]
        assert line.endswith(" s)")
    assert "venv" in proc.stdout and "up to date" in proc.stdout and "cached" in proc.stdout
    recorded = [row.split("\t") for row in phase_log.read_text().splitlines()]
    assert [r[0] for r in recorded] == PHASES and all(float(r[1]) >= 0 for r in recorded)
    assert proc.stderr == ""


@pytest.fixture
def mounted(tmp_path):
    """A tmpfs at tmp_path/mnt with the given mount options; unmounted afterwards."""
    need(os.geteuid() == 0, "mounting a read-only or full file system needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    mounts = []

    def mount(options: str) -> Path:
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], check=True)
        mounts.append(point)
        return point

    yield mount
    for m in mounts:
        subprocess.run(["umount", "-l", str(m)], check=False)


def test_a_read_only_cache_is_one_line_naming_it_and_exit_2(mounted, tmp_path):
    cache = mounted("ro,size=4m") / "cache with space é"
    proc = setup(REPO, FABRIC_BENCH_CACHE=str(cache))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"setup: cache directory {cache} cannot be created (read-only or no permission); set FABRIC_BENCH_CACHE"
    ]


def test_a_full_cache_is_one_line_naming_it_and_exit_2(mounted):
    cache = mounted("size=512k")
    filler = cache / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)  # fills it
    proc = setup(REPO, FABRIC_BENCH_CACHE=str(cache))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line == f"setup: cache directory {cache} is not writable (read-only or full); "
        "set FABRIC_BENCH_CACHE to another directory"
    )


def test_the_horovod_line_says_which_frameworks_it_builds_for_and_a_wrong_option_is_one_line():
    """The set-up line says what Horovod is built with and why: a venv with TensorFlow (the suite's)
    gets both frameworks' ops; an unknown option is refused before anything runs."""
    proc = setup(REPO, VENV=str(VENV))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("setup: horovod wheel ")]
    has_tensorflow = any(VENV.glob("lib/python3*/site-packages/tensorflow/__init__.py"))
    assert ("PyTorch and TensorFlow ops" if has_tensorflow else "PyTorch ops only: all make bench runs") in line
    bare = setup(REPO, "--without-horovod", VENV=str(VENV))  # make bench's: the venv, Horovod after a first result
    assert bare.returncode == 0 and "horovod" not in bare.stdout.split("ready without Horovod")[0].lower()
    assert bare.stdout.splitlines()[-1] == f"setup: ready without Horovod ({VENV}; scripts/setup.sh builds it)"
    wrong = subprocess.run([str(REPO / "scripts/setup.sh"), "--tensorflw"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.splitlines() == [
        "setup: unknown option --tensorflw; use --tensorflow, --test or --without-horovod (or nothing)"
    ]
