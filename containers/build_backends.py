"""The two build back ends: apptainer (to a partial name, %test, rename; once more when packing
the SIF failed after every step passed) and podman (runc, rlimits without CAP_SYS_RESOURCE,
the debootstrap base imported); and reading a built SIF's labels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from containers import stack
from containers.build_inputs import base_image
from containers.host import BuildError, DiskFull, Progress, cache_dir, run_logged, runtime_binary

# Fast compression keeps a multi-GB image build short on 2 cores (~2x bigger than gzip's).
SQUASHFS_ARGS = os.environ.get("FABRIC_BENCH_SQUASHFS_ARGS", "-comp lz4")


def build_apptainer(
    binary: str, definition: Path, final: Path, binds: list[str], log: Path, test: bool = True
) -> tuple[float, float]:
    """Build to a partial name, run its %test, rename: (build seconds, test seconds).
    A failing %test is one BuildError line; nothing is left under the final name."""
    partial = final.with_name(final.name + ".partial")
    # hpccm's blocks unpack and build under /var/tmp, which apptainer binds from the host: two
    # builds at once (a cpu and a cuda stack) shared one /var/tmp/ucx-1.13.1 tree, and the cpu
    # build installed the cuda build's configuration. Each build gets a /var/tmp of its own.
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.var-tmp-", dir=final.parent))
    argv = [
        binary,
        "build",
        "--fakeroot",
        "--force",
        "--notest",
        "--mksquashfs-args",
        SQUASHFS_ARGS,
        "--bind",
        f"{scratch}:/var/tmp",
    ]
    for bind in binds:
        argv += ["--bind", bind]
    try:
        started = time.monotonic()
        _build_sif([*argv, str(partial), str(definition)], log, f"apptainer build of {final.name}")
        built = time.monotonic()
        if test:
            run_logged([binary, "test", str(partial)], log, f"%test of {final.name}", cwd=stack.REPO, stamped=True)
        tested = time.monotonic()
        partial.rename(final)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return round(built - started, 1), round(tested - built, 1)


# Twice in CI (fabric layers FROM the stack, each near the end of its build) and never on a
# development machine, apptainer exited 255 after every step of the recipe had passed, while
# packing the SIF; the logs went with CI's machines (suspected then: sid's mksquashfs 4.7.5, now
# replaced, see scripts/provision-apptainer.sh). A full disk fails at the same point ("while
# creating SIF: ... copy_file_range: no space left on device": packing needs the sandbox, the
# squashfs and the SIF at once: 14-16 GiB for the 4.2 GiB cpu-debian stack), so only a build that failed while
# packing for another cause is run once more, and its log says so.
PACKING = "INFO:    Creating SIF file..."


def _build_sif(argv: list[str], log: Path, what: str) -> None:
    """`apptainer build ARGV`, once more when it failed while packing the SIF (not for a full disk)."""
    start = log.stat().st_size if log.exists() else 0
    try:
        run_logged(argv, log, what, cwd=stack.REPO, stamped=True)  # %files paths: relative to the bundle
    except DiskFull:
        raise
    except BuildError:
        with log.open("rb") as attempt:
            attempt.seek(start)
            if PACKING.encode() not in attempt.read():
                raise
        with log.open("a") as out:
            out.write(
                "fabric-bench: the build failed while packing the SIF, after every step of the "
                "recipe had passed: building once more\n"
            )
        run_logged(argv, log, what, cwd=stack.REPO, stamped=True)


# podman's own default rlimits (nofile, nproc) are above what a host without CAP_SYS_RESOURCE
# lets runc set ("error setting rlimit type 6/7"): builds (containers.conf) and runs
# (launch.ranks.runtimes, --ulimit) ask for these instead
PODMAN_ULIMITS = ("nofile=16384:16384", "nproc=16384:16384")


def podman_env() -> dict[str, str]:
    """podman on these hosts: runc (crun refuses the hybrid cgroup host) and
    ulimits that need no CAP_SYS_RESOURCE (see ../shared/ENVIRONMENT.md)."""
    conf = cache_dir() / "podman-containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f'[engine]\nruntime = "runc"\n[containers]\ndefault_ulimits = {json.dumps(list(PODMAN_ULIMITS))}\n')
    return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(conf))}


def podman_base(binary: str, log: Path, progress: Progress) -> str:
    """Import the debootstrap rootfs as the podman base image; returns its id."""
    env = podman_env()
    found = subprocess.run(
        [binary, "image", "inspect", "--format", "{{.Id}}", stack.BASE_IMAGE_TAG],
        capture_output=True,
        text=True,
        env=env,
    )
    if found.returncode == 0:
        return found.stdout.strip()
    sif = base_image(log, progress)
    with tempfile.TemporaryDirectory() as work:
        # a SIF is not a bare squashfs (its root filesystem sits at an offset): apptainer unpacks it
        run_logged(
            [runtime_binary("apptainer"), "build", "--sandbox", f"{work}/rootfs", str(sif)], log, "unpacking base.sif"
        )
        tar = subprocess.Popen(["tar", "-C", f"{work}/rootfs", "-c", "."], stdout=subprocess.PIPE)
        run_logged(
            [binary, "import", "-", stack.BASE_IMAGE_TAG], log, "podman import of the base", stdin=tar.stdout, env=env
        )
        tar.wait()
    return subprocess.run(
        [binary, "image", "inspect", "--format", "{{.Id}}", stack.BASE_IMAGE_TAG],
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()


def build_podman(
    binary: str, dockerfile: Path, name: str, binds: list[str], log: Path, tag_as: str = "", target: str = ""
) -> tuple[str, str, int]:
    env = podman_env()
    tag = tag_as or f"localhost/fabric-bench:{name}"
    argv = [binary, "build", "--network=host", "-f", str(dockerfile), "-t", tag]
    if target:
        argv += ["--target", target]
    for bind in binds:
        argv += ["-v", f"{bind}:ro"]
    run_logged([*argv, str(stack.REPO)], log, f"podman build of {tag}", env=env, stamped=True)
    info = json.loads(
        subprocess.run([binary, "image", "inspect", tag], capture_output=True, text=True, env=env, check=True).stdout
    )[0]
    return tag, info["Id"], int(info.get("Size", 0))


def inspect(image: str) -> dict:
    """Labels of a built .sif (apptainer inspect --json)."""
    binary = runtime_binary("apptainer")
    if not Path(image).is_file():
        raise BuildError(f"image not found: {image}")
    out = subprocess.run([binary, "inspect", "--json", "--labels", image], capture_output=True, text=True)
    if out.returncode != 0:
        raise BuildError(f"apptainer inspect {image} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)["data"]["attributes"]["labels"]
