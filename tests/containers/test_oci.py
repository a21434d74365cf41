"""Image references, the insecure rule, signed reference files and the check after a pull
(plain data), and a real registry (Debian's docker-registry) on a free port with a small SIF."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from containers import oci
from launch.provenance import images
from launch.errors import UsageError
from tests.conftest import alive, fabric_bench, need

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def test_references_parse_and_pull_only_by_digest():
    ref = oci.parse(f"oras://127.0.0.1:5000/fb/stack-cpu-debian:v1@{DIGEST_A}")
    assert (ref.host, ref.name, ref.tag, ref.digest, ref.local) == (
        "127.0.0.1:5000",
        "fb/stack-cpu-debian",
        "v1",
        DIGEST_A,
        True,
    )
    assert ref.by_digest() == f"127.0.0.1:5000/fb/stack-cpu-debian@{DIGEST_A}"
    assert not oci.parse("registry.example.org/hpc/stack:1").local
    with pytest.raises(oci.RegistryError, match="pinned by digest"):
        oci.parse("127.0.0.1:5000/fb/stack:v1").by_digest()
    for bad in ("stack.sif", "host/../etc:x", "host/Name:tag", f"host/a@sha256:{'z' * 64}", "host/a; rm -rf /"):
        with pytest.raises(oci.RegistryError, match="not an image reference"):
            oci.parse(bad)


def test_plain_http_only_for_this_host():
    with pytest.raises(oci.RegistryError, match="only for a registry on this host"):
        oci.pull(f"registry.example.org/fb/stack@{DIGEST_A}", out=Path("x.sif"), insecure=True)
    with pytest.raises(oci.RegistryError, match="only for a registry on this host"):
        oci.manifest(oci.parse(f"registry.example.org/fb/stack@{DIGEST_A}"), insecure=True)


def _keys(tmp_path: Path, name: str) -> tuple[Path, Path]:
    need(shutil.which("ssh-keygen") is not None, "ssh-keygen (OpenSSH) not installed")
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key), "-C", name], check=True)
    allowed = tmp_path / f"{name}.allowed"
    allowed.write_text(f"{name} {(tmp_path / f'{name}.pub').read_text()}")
    return key, allowed


def test_reference_file_is_signed_and_checked(tmp_path):
    key, allowed = _keys(tmp_path, "site-a")
    _, other = _keys(tmp_path, "site-c")
    refs = tmp_path / "images.json"
    labels = {
        "org.fabric-bench.recipe-hash": "r1",
        "org.fabric-bench.flavour": "cpu-debian",
        "org.label-schema.build-date": "not carried",
    }
    reference = f"127.0.0.1:5000/fb/stack@{DIGEST_B}"
    images.write_references(refs, images.reference_entry(reference, "apptainer", "a" * 64, labels, ""), key)
    expected = images.from_references(refs, reference, allowed, require_signed=True)
    assert expected.image_digest == DIGEST_A
    assert expected.labels == {"org.fabric-bench.recipe-hash": "r1", "org.fabric-bench.flavour": "cpu-debian"}
    assert images.check(DIGEST_A, {**labels, "extra": "x"}, expected) == []
    problems = images.check(DIGEST_B, {**labels, "org.fabric-bench.recipe-hash": "r2"}, expected)
    assert len(problems) == 2 and "digest" in problems[0] and "recipe-hash" in problems[1]
    with pytest.raises(UsageError, match="does not list"):
        images.from_references(refs, reference, other, require_signed=True)
    with pytest.raises(UsageError, match="does not list"):
        images.from_references(refs, f"127.0.0.1:5000/fb/stack@{DIGEST_A}", allowed)
    tampered = json.loads(refs.read_text())
    tampered["images"][0]["image_digest"] = DIGEST_B
    refs.write_text(json.dumps(tampered))
    with pytest.raises(UsageError, match="does not verify"):
        images.from_references(refs, reference, allowed)


def test_reference_file_from_a_stranger_is_validated(tmp_path):
    refs = tmp_path / "images.json"
    for body in (
        "[]",
        json.dumps({"schema": images.SCHEMA, "images": [{"reference": "x"}]}),
        json.dumps(
            {
                "schema": images.SCHEMA,
                "images": [{"reference": "h/a", "runtime": "sh -c evil", "image_digest": DIGEST_A, "labels": {}}],
            }
        ),
    ):
        refs.write_text(body)
        with pytest.raises(UsageError):
            images.read_references(refs)


def test_a_real_registry_serves_and_stops(registry):
    assert alive([registry.pid]) == {registry.pid}
    with pytest.raises(oci.RegistryError, match="404|answered"):
        oci.manifest(oci.parse(f"{registry.address}/fb/missing:v1"))


def test_small_sif_round_trips_pinned_by_digest(registry, tmp_path):
    """A small SIF (a squashfs of one file, built by apptainer) through ORAS and back."""
    need(shutil.which("apptainer") is not None, "apptainer not installed (scripts/provision-apptainer.sh)")
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("fabric-bench\n")
    sif = tmp_path / "small.sif"
    subprocess.run(["apptainer", "build", "--force", str(sif), str(tree)], check=True, capture_output=True)
    pushed = oci.push(str(sif), f"{registry.address}/fb/small:v1")
    assert pushed.image_digest == "sha256:" + oci.remembered_sha256(sif, oci.cache_dir())
    digest, body = oci.manifest(oci.parse(f"{registry.address}/fb/small:v1"))
    assert digest == pushed.manifest_digest
    assert [layer["digest"] for layer in body["layers"]] == [pushed.image_digest]
    pulled = oci.pull(pushed.reference, out=tmp_path / "pulled.sif")
    assert pulled.image_digest == pushed.image_digest
    assert (tmp_path / "pulled.sif").read_bytes() == sif.read_bytes()
    # a pull whose image is not the one expected is refused, and nothing is left under --out
    wrong = tmp_path / "wrong.sif"
    refused = fabric_bench("image", "pull", pushed.reference, "--out", str(wrong), "--expect-digest", DIGEST_A)
    assert refused.returncode == 2 and "refused and removed" in refused.stderr and not wrong.exists()
    untagged = fabric_bench(
        "image", "pull", f"{registry.address}/fb/small:v1", "--out", str(wrong), "--expect-digest", pushed.image_digest
    )
    assert untagged.returncode == 2 and "pinned by digest" in untagged.stderr
