"""The real thing: build the cpu ethernet image with Apptainer, prove its stack
(%test), and run the 2-rank PyTorch benchmark inside it (`apptainer exec`)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.record import read_records
from tests.conftest import alive, need
from containers import build, recipe, stack
from launch import elf_versions

pytestmark = pytest.mark.slow


def apptainer(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("apptainer") or "apptainer", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_image_is_recorded_with_digest_labels_and_log(cpu_ethernet_image):
    image = Path(cpu_ethernet_image.image)
    assert image.is_file() and image.suffix == ".sif"
    assert build._sha256(image) == cpu_ethernet_image.sha256
    assert Path(cpu_ethernet_image.log).is_file() or cpu_ethernet_image.build_seconds >= 0
    labels = build.inspect(str(image))
    assert labels["org.fabric-bench.fabric"] == "ethernet"
    assert labels["org.fabric-bench.flavour"] == "cpu"
    assert labels["org.fabric-bench.recipe-hash"] == cpu_ethernet_image.recipe_hash
    assert labels["org.fabric-bench.version.torch"] == stack.python_versions()["torch"]
    assert any(e["sha256"] == cpu_ethernet_image.sha256 for e in build.registry())


def test_fabric_images_share_the_stack_image_by_digest(cpu_ethernet_image, cpu_slingshot_image):
    """'Images differ only in fabric libraries' as an equality of digests: a second fabric
    image of the flavour (one whose layer builds) is FROM the same stack image, not rebuilt."""
    other = cpu_slingshot_image
    stack_entry = next(e for e in build.registry() if e["fabric"] == "stack" and e["flavour"] == "cpu"
                       and e["image"] == cpu_ethernet_image.stack_image)
    digests = {record.fabric: build.inspect(record.image)["org.fabric-bench.stack-digest"]
               for record in (cpu_ethernet_image, other)}
    print(digests, "stack", stack_entry["sha256"])
    assert set(digests.values()) == {stack_entry["sha256"]} == {build._sha256(Path(stack_entry["image"]))}
    assert other.stack_digest == cpu_ethernet_image.stack_digest
    assert build.inspect(other.image)["org.fabric-bench.fabric"] == "slingshot"


def test_image_self_test_proves_the_stack(cpu_ethernet_image, tmp_path):
    done = apptainer("test", cpu_ethernet_image.image, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for proof in ("ok: openmpi 4.1.4", "ok: torch 2.14.1", "ok: horovod 0.28.1",
                  "horovodrun --check-build: PyTorch, MPI, Gloo", "horovod.torch init (MPI)",
                  # the ethernet preset's components exist in the image
                  "ok: ompi_info: MCA pml ob1", "ok: ompi_info: MCA btl tcp", "ok: fi_info -l: tcp",
                  "ok: ucx: sm",
                  # the site images' communication stack, CUDA off: the same components
                  f"ok: libfabric {stack.LIBFABRIC.version}", "ok: ompi_info: MCA pml ucx",
                  "ok: ompi_info: MCA mtl ofi", "ok: ompi_info: MCA mtl psm2", "ok: ompi_info: MCA pmix ext3x",
                  "ok: ldd: "):
        assert proof in done.stdout


def test_two_rank_ddp_inside_the_image(cpu_ethernet_image, tmp_path):
    # cwd is a fresh directory, so `-m bench.torch_train` is the image's bench/, not the checkout's
    records = tmp_path / "records"
    done = apptainer("exec", "--cleanenv", cpu_ethernet_image.image,
                     "torchrun", "--standalone", "--nproc-per-node", "2", "-m", "bench.torch_train",
                     "--engine", "ddp", "--model", "resnet18", "--image-size", "32", "--batch-size", "8",
                     "--warmup", "1", "--iters", "2", "--batches-per-iter", "2",
                     "--record-dir", str(records), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = [r for r in read_records(records) if r["kind"] == "train"]
    assert len(train) == 2 and {r["rank"] for r in train} == {0, 1}
    for record in train:
        assert record["status"] == "ok", record
        assert record["params_max_abs_diff"] == 0
        assert record["engine"] == "ddp" and record["world_size"] == 2


def test_two_rank_horovod_mpirun_inside_the_image(cpu_ethernet_image, tmp_path):
    records = tmp_path / "records"
    done = apptainer("exec", "--cleanenv", cpu_ethernet_image.image,
                     "mpirun", "-np", "2", "--bind-to", "none", "--mca", "btl", "self,vader,tcp",
                     "python", "-m", "bench.torch_train", "--engine", "horovod", "--model", "resnet18",
                     "--image-size", "32", "--batch-size", "8", "--warmup", "1", "--iters", "2",
                     "--batches-per-iter", "2", "--record-dir", str(records), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = [r for r in read_records(records) if r["kind"] == "train"]
    assert len(train) == 2 and all(r["status"] == "ok" and r["params_max_abs_diff"] == 0 for r in train)


HOST_LIBFABRIC = Path("/usr/lib/x86_64-linux-gnu/libfabric.so.1")   # Debian's libfabric1 (bookworm: 1.17)


def host_libfabric_dir(image: str, folder: Path) -> Path:
    """A host libfabric folder as a Slingshot site binds one: this host's libfabric 1.x, with
    the libraries it links that the image lacks (the cxi one brings libcxi's the same way)."""
    folder.mkdir()
    shutil.copy(HOST_LIBFABRIC.resolve(), folder / "libfabric.so.1")
    for _ in range(3):
        done = apptainer("exec", "--cleanenv", "--bind", f"{folder}:/opt/host/libfabric", image,
                         "ldd", "/opt/host/libfabric/libfabric.so.1", cwd=folder)
        lacking = [line.split()[0] for line in done.stdout.splitlines() if "not found" in line]
        if not lacking:
            return folder
        for name in lacking:
            shutil.copy(Path("/usr/lib/x86_64-linux-gnu", name).resolve(), folder / name)
    raise AssertionError(f"host libfabric's libraries still missing in the image: {lacking}")


MPI_OVER_OFI = ["mpirun", "-np", "2", "--bind-to", "none", "--mca", "pml", "cm", "--mca", "mtl", "ofi",
                "--mca", "mtl_ofi_provider_include", "tcp", "-x", "FI_PROVIDER=tcp",
                "python", "-m", "bench.allreduce", "--backend", "mpi", "--min-bytes", "8",
                "--max-bytes", str(2**20), "--warmup", "1", "--iters", "3"]


def test_the_slingshot_image_runs_mpi_over_a_bound_host_libfabric_1x(cpu_slingshot_image, cpu_ethernet_image,
                                                                      tmp_path):
    """Slingshot binds the host's libfabric (cxi) over the image's: its ofi users must not need
    a symbol version a 1.x host lacks. This host's Debian libfabric 1.17 stands in for it."""
    need(HOST_LIBFABRIC.exists(), "Debian's libfabric1 (make setup-test installs libfabric-bin)")
    host_abi = elf_versions.defined(HOST_LIBFABRIC.read_bytes())
    assert "FABRIC_1.8" not in host_abi and recipe.HOSTABI_FABRIC in host_abi   # a 1.x host ABI
    folder = host_libfabric_dir(cpu_slingshot_image.image, tmp_path / "host-libfabric")

    # the stack's ofi components (ethernet image: linked with libfabric 2.x) refuse that library
    stack_ofi = apptainer("exec", "--cleanenv", cpu_ethernet_image.image, "sh", "-c",
                          f"LD_LIBRARY_PATH={folder}:$LD_LIBRARY_PATH ompi_info 2>&1", cwd=tmp_path)
    assert "MCA mtl: ofi (" not in stack_ofi.stdout and "FABRIC_1.8' not found" in stack_ofi.stdout

    # the slingshot image's: 2 ranks, cm + ofi MTL over the bound host library's tcp provider
    records = tmp_path / "records"
    bound = ["exec", "--cleanenv", "--bind", f"{folder}:/opt/host/libfabric", cpu_slingshot_image.image]
    version = apptainer(*bound, "python", "-c", "import ctypes; v = ctypes.CDLL('libfabric.so.1').fi_version(); "
                        "print(v >> 16, v & 0xffff)", cwd=tmp_path)
    assert version.stdout.split() == ["1", "17"], version.stdout + version.stderr   # the host's, loaded first
    done = apptainer(*bound, *MPI_OVER_OFI, "--record-dir", str(records), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [r for r in read_records(records) if r["kind"] == "allreduce"]
    assert len(results) == 2 and all(r["status"] == "ok" and r["correct"] for r in results)
    assert all(r["world_size"] == 2 for r in results)
    pids = {r["pid"] for r in read_records(records) if "pid" in r}
    assert pids and not alive(pids)
