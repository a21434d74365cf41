"""The podman path, for real: the cpu stack and the ethernet image FROM it built with
podman (its base a `podman import` of the same debootstrap root as Apptainer's), and
the 2-rank allreduce inside it, one container per rank started by host mpirun."""
import json
import shutil
import subprocess

import pytest

from tests.conftest import alive, fabric_bench, need

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def podman_ethernet_image():
    from containers import build

    need(shutil.which("podman") is not None, "podman not installed (make setup-test installs it)")
    need(shutil.which("debootstrap") is not None, "debootstrap not installed (the cpu base image)")
    try:
        return build.build("ethernet", "cpu", "podman", progress=lambda line: None)
    except build.BuildError as exc:
        pytest.fail(f"building the cpu ethernet image with podman: {exc}")


def test_two_ranks_in_the_podman_image_over_ethernet_with_host_mpirun(podman_ethernet_image, tmp_path):
    image = podman_ethernet_image
    assert image.runtime == "podman" and image.stack_digest and image.stack_digest != image.sha256
    proc = fabric_bench("run", "--runtime", "podman", "--image", image.image, "--launcher", "mpirun",
                        "--fabric", "ethernet", "--benchmark", "allreduce", "--backend", "mpi", "--ranks", "2",
                        "--min-bytes", "8", "--max-bytes", str(2**20), "--iters", "3", "--warmup", "1",
                        "--results", str(tmp_path), "--timeout", "300")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (path,) = tmp_path.glob("*/result.json")
    r = json.loads(path.read_text())
    assert r["status"] == "ok" and r["correct"] and r["world_size"] == 2
    assert r["argv"][0].endswith("mpirun") and r["argv"].count("podman") == 1 and image.image in r["argv"]
    # the image's labels and the stack it was built FROM, read through podman
    assert r["image"]["labels"]["org.fabric-bench.fabric"] == "ethernet"
    assert r["image"]["stack_digest"] == image.stack_digest
    assert any("built for fabric ethernet" in check for check in r["launch"]["preflight"])
    # the ranks ran the image's Open MPI (the stack's), inside containers that are gone
    assert (r["versions"].get("mpi") or "").startswith("Open MPI")
    pids = {json.loads(beat.read_text())["pid"] for beat in (path.parent / "ranks").glob("heartbeat-*.json")}
    assert len(pids) == 2 and not alive(pids)
    running = subprocess.run(["podman", "ps", "-q"], capture_output=True, text=True,
                             env=_podman_env()).stdout.split()
    assert running == [], running


def _podman_env():
    from containers.build import _podman_env as env

    return env()
