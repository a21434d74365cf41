"""A failed build's one line names its cause: containers.host.failure_cause reads the output the
command wrote to its log. The lines below are the tools' own words, as they appear in this
project's build logs (each stamped with its seconds by run_logged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.host import NO_SPACE, BuildError, DiskFull, failure_cause, run_logged

PIP_THEN_ENGINE = """[  17.1s] Looking in links: /wheelhouse
[  17.9s] ERROR: Could not find a version that satisfies the requirement torch==2.14.1 (from versions: none)
[  18.0s] FATAL:   While performing build: while running engine: exit status 1
"""
FULL_WHILE_PACKING = """[  93.8s] INFO:    To see mksquashfs output with progress bar enable verbose logging
[ 121.4s] FATAL:   While performing build: while creating SIF: while creating container: write /c/x.sif.partial: \
copy_file_range: no space left on device
"""


@pytest.mark.parametrize(
    "output, cause",
    [
        # apptainer's closing engine line only repeats a %post failure: pip's line is the cause
        (
            PIP_THEN_ENGINE,
            "ERROR: Could not find a version that satisfies the requirement torch==2.14.1 (from versions: none)",
        ),
        (FULL_WHILE_PACKING, NO_SPACE),
        (
            "I: Retrieving InRelease\nE: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release\n",
            "E: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release",
        ),
        (
            "image-test: ok: ldd\nimage-test: FAIL: ompi_info: no MCA mtl psm2\n",
            "image-test: FAIL: ompi_info: no MCA mtl psm2",
        ),
        ("gcc -Werror -O2 -c x.c\nmake: *** [Makefile:3: x.o] Error 1\n", "make: *** [Makefile:3: x.o] Error 1"),
        ("building\n-Werror is on\n", ""),  # a flag's name is not an error
    ],
)
def test_the_cause_is_the_line_the_tool_named_it_in(output, cause):
    assert failure_cause(output) == cause


def test_a_long_cause_is_cut_to_one_readable_line():
    cause = failure_cause("ERROR: " + "x" * 1000)
    assert len(cause) == 240 and cause.endswith("…")


def test_run_logged_raises_disk_full_on_a_real_enospc(tmp_path: Path):
    """dd writing to /dev/full gets the kernel's ENOSPC: the error says the disk filled and how
    much is free where the build wrote; the log keeps the tool's own words."""
    log = tmp_path / "build.log"
    with pytest.raises(DiskFull, match=r"^dd failed: the disk filled \([0-9.]+ GiB free under /"):
        run_logged(["dd", "if=/dev/zero", "of=/dev/full", "bs=1k", "count=1"], log, "dd")
    assert "No space left on device" in log.read_text()


def test_run_logged_names_the_exit_code_and_cause_of_other_failures(tmp_path: Path):
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as failed:
        run_logged(["sh", "-c", "echo 'ERROR: no wheel for horovod'; exit 3"], log, "pip download")
    assert not isinstance(failed.value, DiskFull)
    assert str(failed.value) == f"pip download failed (exit 3): ERROR: no wheel for horovod; log: {log}"
