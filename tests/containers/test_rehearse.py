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
