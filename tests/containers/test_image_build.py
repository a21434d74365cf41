"""The real thing: build the ethernet image of the tests' flavour (cpu-debian) with
Apptainer, prove its stack (%test), and run the 2-rank PyTorch benchmark inside it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.record import read_records
from containers import build, recipe, rehearse, stack
from tests.conftest import IMAGE_FLAVOUR

pytestmark = pytest.mark.slow


def apptainer(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("apptainer") or "apptainer", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_image_is_recorded_with_digest_labels_and_log(cpu_ethernet_image):
    image = Path(cpu_ethernet_image.image)
    assert image.is_file() and image.suffix == ".sif"
    assert build.image_sha256(image) == cpu_ethernet_image.sha256
    assert Path(cpu_ethernet_image.log).is_file() or cpu_ethernet_image.build_seconds >= 0
    labels = build.inspect(str(image))
    assert labels["org.fabric-bench.fabric"] == "ethernet"
    assert labels["org.fabric-bench.flavour"] == IMAGE_FLAVOUR
    assert labels["org.fabric-bench.recipe-hash"] == cpu_ethernet_image.recipe_hash
    assert labels["org.fabric-bench.version.torch"] == stack.python_versions()["torch"]
    assert any(e["sha256"] == cpu_ethernet_image.sha256 for e in build.registry())


def test_fabric_images_share_the_stack_image_by_digest(cpu_ethernet_image):
    """'Images differ only in fabric libraries' as an equality of digests: another fabric image
    of the flavour is built FROM the same stack image, which is not rebuilt. Its %test also
    proves its Open MPI loads over a host libfabric 1.x. (One, not more: each costs CI ~2 min
    and 4.2 GiB, with ~15 GiB free while it packs.)"""
    fabrics = ("slingshot",)
    had = {e["image"] for e in build.registry() if Path(e["image"]).is_file()}
    others = [build.build(fabric, IMAGE_FLAVOUR, "apptainer", progress=lambda line: None) for fabric in fabrics]
    try:
        _share_the_stack(cpu_ethernet_image, others, fabrics)
    finally:  # a SIF this test built goes (4.2 GiB no later test reads); one the user had stays
        for record in others:
            if record.image not in had:
                Path(record.image).unlink(missing_ok=True)


def _share_the_stack(cpu_ethernet_image, others, fabrics):
    stack_entry = next(
        e
        for e in build.registry()
        if e["fabric"] == "stack" and e["flavour"] == IMAGE_FLAVOUR and e["image"] == cpu_ethernet_image.stack_image
    )
    digests = {
        record.fabric: build.inspect(record.image)["org.fabric-bench.stack-digest"]
        for record in (cpu_ethernet_image, *others)
    }
    print(digests, "stack", stack_entry["sha256"])
    assert set(digests.values()) == {stack_entry["sha256"]} == {build.image_sha256(Path(stack_entry["image"]))}
    for other, fabric in zip(others, fabrics):
        assert other.stack_digest == cpu_ethernet_image.stack_digest
        assert build.inspect(other.image)["org.fabric-bench.fabric"] == fabric
    sling = "\n".join(rehearse.test_output(Path(others[0].log)))
    assert re.search(
        rf"ok: fi-abi: \d+ libfabric users \(fi_info, under \S+/openmpi/lib\) need at most "
        rf"{recipe.HOST_ABI_NODE}",
        sling,
    ), sling[-2000:]


def test_image_self_test_proves_the_stack(cpu_ethernet_image):
    """What the build's own `apptainer test` printed (after --notest; an image whose %test
    fails is not recorded), read from its log: running it again would repeat its 75 s."""
    output = "\n".join(rehearse.test_output(Path(cpu_ethernet_image.log)))
    assert "FAIL" not in output
    for proof in (
        "ok: openmpi 4.1.4",
        "ok: torch 2.14.1",
        "ok: horovod 0.28.1",
        "ok: horovod.torch: PyTorch extension with MPI and Gloo (mpi_built=True gloo_built=True size=1)",
        "ok: horovodrun: the launcher loads",
        "horovod.torch init (MPI)",
        # the ethernet preset's components exist in the image
        "ok: ompi_info: MCA pml ob1",
        "ok: ompi_info: MCA btl tcp",
        "ok: fi_info -l: tcp",
        "ok: ucx: sm",
        # the components the site images' stack has too
        f"ok: libfabric {stack.versions(IMAGE_FLAVOUR)['libfabric']}",
        "ok: ompi_info: MCA pml ucx",
        "ok: ompi_info: MCA mtl ofi",
        "ok: ompi_info: MCA mtl psm2",
        "ok: ompi_info: MCA pmix ext3x",
        "ok: ldd: ",
    ):
        assert proof in output, output[-3000:]


def test_two_rank_ddp_inside_the_image(cpu_ethernet_image, tmp_path):
    # cwd is a fresh directory, so `-m bench.torch_train` is the image's bench/, not the checkout's
    records = tmp_path / "records"
    done = apptainer(
        "exec",
        "--cleanenv",
        cpu_ethernet_image.image,
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "bench.torch_train",
        "--engine",
        "ddp",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--batches-per-iter",
        "2",
        "--record-dir",
        str(records),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = [r for r in read_records(records) if r["kind"] == "train"]
    assert len(train) == 2 and {r["rank"] for r in train} == {0, 1}
    for record in train:
        assert record["status"] == "ok", record
        assert record["params_max_abs_diff"] == 0
        assert record["engine"] == "ddp" and record["world_size"] == 2


def test_two_rank_horovod_mpirun_inside_the_image(cpu_ethernet_image, tmp_path):
    records = tmp_path / "records"
    done = apptainer(
        "exec",
        "--cleanenv",
        cpu_ethernet_image.image,
        "mpirun",
        "-np",
        "2",
        "--bind-to",
        "none",
        "--mca",
        "btl",
        "self,vader,tcp",
        "python",
        "-m",
        "bench.torch_train",
        "--engine",
        "horovod",
        "--model",
        "resnet18",
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--batches-per-iter",
        "2",
        "--record-dir",
        str(records),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = [r for r in read_records(records) if r["kind"] == "train"]
    assert len(train) == 2 and all(r["status"] == "ok" and r["params_max_abs_diff"] == 0 for r in train)
