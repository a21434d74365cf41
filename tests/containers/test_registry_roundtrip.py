"""The real round trip: the cpu-debian stack SIF and its ethernet image through a real registry
(Debian's docker-registry) with Apptainer (ORAS), pulled by digest into another folder and checked
against a signed reference file; and a labelled OCI image with podman, from one image store to
another. Digests are asserted after the trip; the registry's pid is gone afterwards."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from containers import oci
from launch.provenance import images
from tests.conftest import fabric_bench, need

pytestmark = pytest.mark.slow


@pytest.fixture
def site_key(tmp_path):
    need(shutil.which("ssh-keygen") is not None, "ssh-keygen (OpenSSH) not installed")
    key = tmp_path / "site-a.key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key), "-C", "site-a"], check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"site-a {Path(str(key) + '.pub').read_text()}")
    return key, allowed


def _json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout[out.stdout.index("{") :])


def test_cpu_debian_stack_and_fabric_sifs_round_trip(cpu_ethernet_image, registry, site_key, tmp_path):
    key, allowed = site_key
    refs = tmp_path / "site-a" / "images.json"
    refs.parent.mkdir()

    def push(name: str, sif: str) -> dict:
        to = f"{registry.address}/fb/{name}:v1"
        argv = ("image", "push", sif, "--to", to, "--reference-file", str(refs), "--sign-key", str(key))
        return _json(fabric_bench(*argv, timeout=1200))

    # the stack SIF goes and comes back by digest, and its copy goes, before the fabric SIF is pushed:
    # two 4.2 GiB images on the registry's disk and a third pulled would be 12.7 GiB at once. (The
    # fabric SIF's pull by digest and a replay in it: tests/benchmarks/test_two_sites.py)
    stack = push("stack-cpu-debian", cpu_ethernet_image.stack_image)
    assert stack["image_digest"] == f"sha256:{cpu_ethernet_image.stack_digest}"
    site_b = tmp_path / "site-b"
    apptainer_cache = tmp_path / "apptainer-cache"
    env = {**os.environ, "APPTAINER_CACHEDIR": str(apptainer_cache)}
    out = site_b / "stack-cpu-debian.sif"
    try:
        pull = ("image", "pull", stack["reference"], "--out", str(out), "--reference-file", str(refs))
        pulled = _json(fabric_bench(*pull, "--allowed-signers", str(allowed), timeout=1200, env=env))
        assert pulled["image_digest"] == f"sha256:{cpu_ethernet_image.stack_digest}"
        assert oci.remembered_sha256(out, oci.cache_dir()) == cpu_ethernet_image.stack_digest  # hashed again
        assert Path(pulled["sbom"]).is_file()  # site A's SBOM came along
    finally:  # 4.2 GiB, gone whether the test passed or not
        shutil.rmtree(site_b, ignore_errors=True)
    # a pull leaves one copy of the image, not a second one in apptainer's cache
    cached = sum(f.stat().st_size for f in apptainer_cache.rglob("*") if f.is_file())
    assert cached < 2**20, f"{cached} bytes left in apptainer's cache by the pull"
    # the fabric SIF joins the stack's in one signed reference file
    fabric = push("ethernet-cpu-debian", cpu_ethernet_image.image)
    assert fabric["image_digest"] == f"sha256:{cpu_ethernet_image.sha256}"
    entries = images.read_references(refs, allowed_signers=allowed, require_signed=True)
    assert {(e["reference"], e["image_digest"]) for e in entries} == {
        (stack["reference"], stack["image_digest"]),
        (fabric["reference"], fabric["image_digest"]),
    }


def _labelled_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = b"fabric-bench podman round trip\n"
        info = tarfile.TarInfo("etc/fabric-bench-hello")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_podman_image_round_trips_between_two_stores(registry, site_key, tmp_path):
    """The 8 GB cpu-debian podman image is not used here: podman compresses every layer on push,
    which took minutes per GB on two shared cores (docs/two-sites.md); a labelled image does."""
    need(shutil.which("podman") is not None, "podman not installed (scripts/setup.sh --test)")
    key, allowed = site_key
    store_a, store_b = tmp_path / "store-a", tmp_path / "store-b"
    try:
        head = oci.podman(store_a)
        labels = {
            "org.fabric-bench.fabric": "ethernet",
            "org.fabric-bench.flavour": "cpu-debian",
            "org.fabric-bench.recipe-hash": "0" * 64,
        }
        changes = [arg for k, v in labels.items() for arg in ("--change", f"LABEL {k}={v}")]
        made = subprocess.run(
            [*head, "import", *changes, "-", "localhost/fb-roundtrip:v1"],
            input=_labelled_tar(),
            capture_output=True,
            env=oci.podman_env(),
        )
        assert made.returncode == 0, made.stderr.decode(errors="replace")
        image_id = oci.podman_id("localhost/fb-roundtrip:v1", store_a)
        refs = tmp_path / "images.json"
        push_out = fabric_bench(
            "image",
            "push",
            "localhost/fb-roundtrip:v1",
            "--runtime",
            "podman",
            "--podman-store",
            str(store_a),
            "--to",
            f"{registry.address}/fb/roundtrip:v1",
            "--reference-file",
            str(refs),
            "--sign-key",
            str(key),
        )
        pushed = _json(push_out)
        assert pushed["image_digest"] == image_id
        assert "no SBOM" in push_out.stderr
        pulled = _json(
            fabric_bench(
                "image",
                "pull",
                pushed["reference"],
                "--runtime",
                "podman",
                "--podman-store",
                str(store_b),
                "--reference-file",
                str(refs),
                "--allowed-signers",
                str(allowed),
            )
        )
        assert pulled["image_digest"] == image_id
        assert oci.podman_id(pushed["reference"], store_b) == image_id
    finally:
        for store in (store_a, store_b):
            if store.exists():
                subprocess.run([*oci.podman(store), "system", "reset", "-f"], capture_output=True, env=oci.podman_env())
            shutil.rmtree(oci.runroot(store), ignore_errors=True)
