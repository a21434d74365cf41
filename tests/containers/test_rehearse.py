"""What a rehearsal record takes from a build log: seconds per step and the %test output."""

from __future__ import annotations

from containers import rehearse, sources

UCX, OMPI = sources.source("ucx").site_url, sources.source("openmpi").site_url
LOG = f"""
$ /usr/bin/apptainer build --fakeroot --force --notest stack-devel.sif.partial stack-devel.def
[     0.5s] INFO:    Starting build...
[    10.0s] rehearsal wget: {UCX} <- ucx-1.13.1.tar.gz (sha256 abc)
[   110.0s] rehearsal wget: {OMPI} <- openmpi-4.1.4.tar.bz2 (sha256 def)
[   400.0s] + python3 -m venv /opt/fabric-bench/venv
[   500.0s] + PATH=/usr/local/openmpi/bin:$PATH /opt/fabric-bench/src/horovod/build-wheel.sh python /tmp/h
[   800.0s] INFO:    Creating SIF file...
[   830.0s] INFO:    Build complete: stack-devel.sif.partial

$ /usr/bin/apptainer test stack.sif.partial
[     1.0s] image-test: ok: openmpi 4.1.4
[     2.0s] image-test: ok: ompi_info: CUDA support
"""


def test_component_seconds_and_test_output_come_from_the_stamped_log(tmp_path):
    log = tmp_path / "build.log"
    log.write_text(LOG)
    assert rehearse.component_seconds(log) == {
        "os packages and copies": 10.0,
        "ucx": 100.0,
        "openmpi": 290.0,
        "python stack (pip)": 100.0,
        "horovod (build)": 300.0,
        "squashfs": 30.0,
    }
    assert rehearse.test_output(log) == ["image-test: ok: openmpi 4.1.4", "image-test: ok: ompi_info: CUDA support"]


def test_a_record_is_named_by_its_recipe_hash():
    path = rehearse.record_path("efa", "cuda", "0123456789abcdef" * 4)
    assert path.parent == rehearse.RECORDS and path.name == "cuda-efa-0123456789abcdef.json"


SELF_TEST = """image-test: ok: openmpi 4.1.4
image-test: report: ompi_info: mca:mpi:base:param:mpi_built_with_cuda_support:value:true
image-test: report: ompi_info: MCA pml: ucx (MCA v2.1.0, API v2.0.0, Component v4.1.4)
image-test: ok: ompi_info: CUDA-aware, pml ucx (report above)
image-test: report: ucx_info -d: Transport: tcp
image-test: report: ucx modules: libuct_cuda.so.0
image-test: report: horovod nccl: file=/opt/fabric-bench/venv/x/horovod/__init__.py mpi_built=True cuda_built=True nccl_built=True gloo_built=True
image-test: report: horovod mpi: file=/opt/fabric-bench/horovod-mpi-gpu/horovod/__init__.py mpi_built=True cuda_built=True nccl_built=False gloo_built=True
image-test: report: horovod mpi:     [X] MPI
image-test: report: nccl-tests: all_reduce_perf
image-test: FAIL: something
""".splitlines()


def test_the_self_test_report_groups_what_each_check_saw():
    report = rehearse.self_test_report(SELF_TEST)
    assert report["ok"] == ["openmpi 4.1.4", "ompi_info: CUDA-aware, pml ucx (report above)"]
    assert report["fail"] == ["something"]
    assert report["sections"]["ompi_info"][0].endswith("mpi_built_with_cuda_support:value:true")
    assert report["sections"]["ucx_info -d"] == ["Transport: tcp"]
    assert report["sections"]["nccl-tests"] == ["all_reduce_perf"]
    assert report["horovod"]["mpi"]["nccl_built"] == "False" and report["horovod"]["mpi"]["cuda_built"] == "True"
    assert report["horovod"]["mpi"]["file"].startswith("/opt/fabric-bench/horovod-mpi-gpu/")
    assert report["horovod"]["nccl"]["nccl_built"] == "True"
    assert report["sections"]["horovod mpi"][-1].strip() == "[X] MPI"


def test_the_second_horovod_build_has_its_own_seconds(tmp_path):
    log = tmp_path / "build.log"
    log.write_text(
        "$ /usr/bin/apptainer build --fakeroot stack-devel.sif.partial stack-devel.def\n"
        "[    10.0s] + PATH=/x HOROVOD_GPU_OPERATIONS=NCCL /opt/src/horovod/build-wheel.sh py /tmp/horovod\n"
        "[   100.0s] + PATH=/x HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=MPI /opt/src/horovod/build-wheel.sh py /tmp/h\n"
        "[   250.0s] INFO:    Creating SIF file...\n"
        "[   260.0s] INFO:    Build complete\n"
    )
    seconds = rehearse.component_seconds(log)
    assert seconds["horovod (build)"] == 90.0 and seconds["horovod mpi-gpu (build)"] == 150.0
