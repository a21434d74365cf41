"""`fabric-bench image ...`: render for real; bad input is one line and exit 2."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from containers import build
from tests.conftest import REPO, fabric_bench


def test_render_writes_def_and_dockerfile(tmp_path):
    out = tmp_path / "ib"
    done = fabric_bench("image", "render", "--fabric", "infiniband", "--flavour", "cuda", "--out", str(out))
    assert done.returncode == 0, done.stderr
    definition, dockerfile = (out / "infiniband-cuda.def").read_text(), (out / "Dockerfile").read_text()
    assert definition.startswith("# fabric-bench image: fabric=infiniband flavour=cuda")
    assert "Stage: runtime" in definition and "FROM localhost/fabric-bench-stack:cuda" in dockerfile
    assert "org.fabric-bench.fabric=infiniband" in dockerfile
    assert "FROM nvidia/cuda:" in (out / "Dockerfile.stack").read_text()
    assert "From: nvidia/cuda:" in (out / "stack-cuda-devel.def").read_text()
    assert "From: fabric-bench-stack-cuda-devel.sif" in (out / "stack-cuda.def").read_text()


@pytest.mark.parametrize(
    "args, cause",
    [
        (["render", "--fabric", "myrinet", "--flavour", "cpu", "--out", "OUT"], "unknown fabric 'myrinet'"),
        (["render", "--fabric", "efa", "--flavour", "rocm", "--out", "OUT"], "unknown flavour 'rocm'"),
        (["build", "--fabric", "efa", "--flavour", "cpu", "--runtime", "docker"], "unknown runtime 'docker'"),
        (["build", "--fabric", "nope"], "unknown fabric 'nope'"),
        (["inspect", "/nonexistent/x.sif"], "image not found: /nonexistent/x.sif"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, cause, tmp_path):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    done = fabric_bench("image", *args, env={**os.environ, "FABRIC_BENCH_CACHE": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip() == f"fabric-bench: error: {cause}" or (
        done.stderr.count("\n") == 1 and cause in done.stderr
    ), done.stderr


def test_missing_runtime_binary(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "FABRIC_BENCH_CACHE": str(tmp_path)}
    done = fabric_bench("image", "build", "--fabric", "efa", "--flavour", "cuda", "--runtime", "podman", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "container runtime 'podman' not found on PATH" in done.stderr


def error_line(stderr: str) -> str:
    """The single error line (exactly one) of a failed command."""
    errors = [line for line in stderr.splitlines() if line.startswith("fabric-bench: error:")]
    assert len(errors) == 1 and stderr.rstrip().endswith(errors[0]), stderr
    return errors[0]


def fake_runtime(directory: Path, script: str) -> None:
    path = directory / "apptainer"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def fake_build(tmp_path: Path, script: str, *args: str):
    """`fabric-bench image build ARGS` with a stand-in apptainer; returns (result, cache, env)."""
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir(exist_ok=True)
    fake_runtime(bin_dir, script)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FABRIC_BENCH_CACHE": str(cache)}
    return fabric_bench("image", "build", *args, env=env), cache, env


def assert_failed_and_recorded_nothing(done, cache: Path, stage: str, code: int, logged: str, cause: str = "") -> None:
    assert done.returncode == 2
    error = error_line(done.stderr)  # progress lines may come before it
    # the one line names the stage, the exit code, the cause the tool's output gave, and the log
    assert stage in error and re.search(rf"failed \(exit {code}\): .*{re.escape(cause)}.*; log: ", error), error
    log = Path(error.split("log: ")[1])
    assert log.is_file() and logged in log.read_text()
    # a full disk is a common cause: the log ends with the free space where the build wrote
    assert re.search(
        rf"free space after the failure: [0-9.]+ GiB under {re.escape(str(log.parent))}\n", log.read_text()
    )
    images = cache / "images"
    # a finished devel stage may stay (it is reused), a stack image may not
    assert not [p for p in images.glob("stack-cuda-*.sif") if not p.name.startswith("stack-cuda-devel-")]
    assert not list(images.glob("*.partial"))
    assert not (images / "registry.json").exists()


def test_failed_build_names_the_log_and_leaves_no_image(tmp_path):
    # An apptainer that writes half an image, then fails: the build must not keep it.
    done, cache, _ = fake_build(
        tmp_path,
        'for last; do :; done\necho "FATAL: no network" >&2\n'
        'for a; do case $a in *.partial) echo half > "$a";; esac; done\nexit 255\n',
        "--fabric",
        "efa",
        "--flavour",
        "cuda",
    )
    # the stack comes first: its devel stage is the first thing built
    assert_failed_and_recorded_nothing(done, cache, "apptainer build of stack-cuda-", 255, "FATAL: no network")
    assert not list((cache / "images").glob("*.sif"))


def test_build_records_and_reuses_an_image(tmp_path, monkeypatch):
    # The driver's bookkeeping with a stand-in runtime that "builds" a small file.
    first, cache, env = fake_build(
        tmp_path,
        'for a; do case $a in *.partial) echo "image $$" > "$a";; esac; done\n',
        "--fabric",
        "slingshot",
        "--flavour",
        "cuda",
    )
    assert first.returncode == 0, first.stderr
    again = fabric_bench("image", "build", "--fabric", "slingshot", "--flavour", "cuda", env=env)
    assert again.returncode == 0 and "cached" in again.stderr
    listed = fabric_bench("image", "list", "--json", env=env)
    import json

    entries = json.loads(listed.stdout)
    # the stack image first (built once, with its devel stage), then the fabric image FROM it
    assert [e["fabric"] for e in entries] == ["stack", "slingshot"]
    stack_entry, entry = entries
    assert Path(stack_entry["devel_image"]).is_file()
    assert entry["stack_digest"] == stack_entry["sha256"] and entry["stack_image"] == stack_entry["image"]
    image = Path(entry["image"])
    assert image.read_text().startswith("image ") and json.loads(first.stdout)["sha256"] == entry["sha256"]
    definition = (cache / "images/recipes" / image.stem / "image.def").read_text()
    assert f"From: {stack_entry['image']}" in definition
    assert f"org.fabric-bench.stack-digest {stack_entry['sha256']}" in definition
    monkeypatch.setenv("FABRIC_BENCH_CACHE", str(cache))
    assert build.find("slingshot", "cuda", "apptainer")["image"] == str(image)


# A stand-in apptainer whose builds print apptainer's packing line, then fail (exit 255) until
# COUNT (a file of one line per build) reaches $1; tests, and every other command, pass.
FLAKY_PACKING = """case $1 in build) ;; *) exit 0;; esac
echo x >> "{count}"
echo "{packing}"
if [ "$(wc -l < "{count}")" -le {failures} ]; then echo "FATAL:   While performing build: packer failed" >&2; exit 255; fi
for a; do case $a in *.partial) echo "image $$" > "$a";; esac; done
"""


@pytest.mark.parametrize("failures, builds, ok", [(1, 4, True), (2, 2, False)])
def test_a_build_that_failed_while_packing_runs_once_more(tmp_path, failures, builds, ok):
    count = tmp_path / "builds"
    script = FLAKY_PACKING.format(count=count, packing=build.PACKING, failures=failures)
    done, cache, _ = fake_build(tmp_path, script, "--fabric", "ethernet", "--flavour", "cuda")
    # the cuda stack's devel stage (failed, then once more), its runtime stage, the fabric layer
    assert len(count.read_text().splitlines()) == builds, done.stderr
    if ok:
        assert done.returncode == 0, done.stderr
        logs = "".join(p.read_text() for p in (cache / "images/logs").glob("stack-*.log"))
        assert logs.count("failed while packing the SIF") == 1
    else:  # failed twice while packing: one error line, nothing recorded
        assert_failed_and_recorded_nothing(
            done,
            cache,
            "apptainer build of stack-cuda-",
            255,
            "failed while packing the SIF",
            cause="FATAL:   While performing build: packer failed",
        )


def test_a_build_that_failed_before_packing_is_not_run_again(tmp_path):
    count = tmp_path / "builds"
    done, cache, _ = fake_build(
        tmp_path,
        f'echo x >> "{count}"\necho "FATAL:   exit status 100" >&2\nexit 255\n',
        "--fabric",
        "ethernet",
        "--flavour",
        "cuda",
    )
    assert_failed_and_recorded_nothing(
        done, cache, "apptainer build of stack-cuda-", 255, "exit status 100", cause="FATAL:   exit status 100"
    )
    assert len(count.read_text().splitlines()) == 1


# A stand-in apptainer whose build passes every step, then fills a disk while packing: its write
# goes to /dev/full, so the kernel's ENOSPC and dd's own message are real ("No space left on
# device", as apptainer's "copy_file_range: no space left on device" was on a full CI disk).
FULL_WHILE_PACKING = """case $1 in build) ;; *) exit 0;; esac
echo x >> "{count}"
echo "{packing}"
dd if=/dev/zero of=/dev/full bs=1k count=1
exit 255
"""


def test_a_build_that_filled_the_disk_says_so_and_is_not_run_again(tmp_path):
    count = tmp_path / "builds"
    done, cache, _ = fake_build(
        tmp_path,
        FULL_WHILE_PACKING.format(count=count, packing=build.PACKING),
        "--fabric",
        "ethernet",
        "--flavour",
        "cuda",
    )
    assert done.returncode == 2
    assert len(count.read_text().splitlines()) == 1  # another attempt would fill it again
    error = error_line(done.stderr)
    assert re.search(
        r"apptainer build of stack-cuda-devel-\S+ failed: the disk filled \([0-9.]+ GiB free under "
        r"\S",
        error,
    ), error
    log = Path(error.split("log: ")[1])
    assert "building once more" not in log.read_text()
    assert not list((cache / "images").glob("*.partial")) and not (cache / "images/registry.json").exists()


def test_failing_image_test_names_the_stage_and_records_nothing(tmp_path):
    # A runtime whose builds succeed but whose `apptainer test` fails: no image, no record.
    done, cache, _ = fake_build(
        tmp_path,
        'if [ "$1" = test ]; then echo "image-test: FAIL: ompi_info: no MCA mtl '
        'psm2" >&2; exit 1; fi\nfor a; do case $a in *.partial) echo "image $$" > "$a";; '
        "esac; done\n",
        "--fabric",
        "omnipath",
        "--flavour",
        "cuda",
    )
    assert_failed_and_recorded_nothing(
        done,
        cache,
        "%test of stack-cuda-",
        1,
        "image-test: FAIL: ompi_info: no MCA mtl psm2",
        cause="image-test: FAIL: ompi_info: no MCA mtl psm2",
    )


def test_the_horovod_wheel_is_found_under_a_cache_path_with_spaces(tmp_path, monkeypatch):
    """build-wheel.sh prints the wheel's path as its last line; CI's cache is under "cold start é"."""
    from containers import build, stack

    wheel = tmp_path / "cold start é" / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"wheel")
    script = tmp_path / "build-wheel.sh"
    script.write_text(f"#!/bin/sh\necho 'cached wheel:'\necho '{wheel}'\n")
    script.chmod(0o755)
    monkeypatch.setattr(stack, "HOROVOD_DIR", tmp_path)
    assert build.horovod_wheel(tmp_path / "log") == wheel


def test_the_host_builds_one_horovod_wheel_for_the_venv_and_the_images():
    """scripts/setup.sh and the image build (build_inputs.horovod_wheel) ask build-wheel.sh for the
    same wheel: other options would key another wheel, and the first image build would compile
    Horovod again (~4 min on 2 cores)."""
    from containers import build_inputs

    setup = (REPO / "scripts/setup.sh").read_text()
    calls = re.findall(r"build-wheel\.sh \"\$venv/bin/python\" \"\$cache\"([^2]*)2>", setup)
    assert [call.split() for call in calls] == [list(build_inputs.HOST_HOROVOD_BUILD)]


def test_build_wheel_refuses_an_unknown_option_in_one_line(tmp_path):
    proc = subprocess.run(
        [str(REPO / "containers/horovod/build-wheel.sh"), sys.executable, str(tmp_path), "--with-debug"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--with-debug" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing built, nothing cached


def test_a_rebuilt_horovod_wheel_makes_a_new_wheelhouse(tmp_path):
    """Two builds of Horovod 0.28.1 with other inputs share the wheel's name, not its folder: the
    image must not keep the first build's wheel from a wheelhouse keyed by the name alone."""
    from containers import build_inputs

    name = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    first, second = tmp_path / "horovod-d04ba25d42e1db81" / name, tmp_path / "horovod-2c496d9d5e0a5d1b" / name
    assert build_inputs.wheelhouse_key(first) != build_inputs.wheelhouse_key(second)
    assert build_inputs.wheelhouse_key(first) == build_inputs.wheelhouse_key(Path(str(first)))
