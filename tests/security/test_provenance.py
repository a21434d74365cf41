"""Signed archives: who signed is shown; a changed archive, an untrusted key or (when required)
no signature at all is refused, with the real ssh-keygen (issue 28)."""

import json
import subprocess

import pytest

from launch.provenance import archive as archives
from launch.errors import UsageError
from launch.provenance.signing import NAMESPACE
from tests.conftest import fabric_bench
from tests.security.conftest import hostile_result, write_archive


def test_a_signed_archive_names_its_signer_in_replay_and_compare(tmp_path, site_key):
    key, allowed = site_key
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()], sign_key=key)
    proc = fabric_bench("replay", str(archive), "--dry-run", "--allowed-signers", str(allowed), "--require-signed")
    assert proc.returncode == 0, proc.stderr
    assert "signed by site-a@example.org (verified against the allowed signers)" in proc.stdout
    untrusted_view = fabric_bench("replay", str(archive), "--dry-run")
    assert (
        "signed by key SHA256:" in untrusted_view.stdout
        and "not checked against allowed signers" in untrusted_view.stdout
    )
    compared = fabric_bench(
        "compare", str(archive), str(archive), "--allowed-signers", str(allowed), "--require-signed"
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert compared.stderr.count("signed by site-a@example.org") == 2


def _tampered(path, tmp_path, change, resign_key=None):
    """The archive's members with `change` applied and the manifest recomputed, keeping the
    original signature unless re-signed: what an attacker who edits a number can do."""
    verified = archives.read(path)
    members = dict(verified.members)
    change(members)
    out = tmp_path / "tampered.tar.gz"
    archives.write(members, out, resign_key)
    if resign_key is None and verified.signature is not None:  # put the old signature back in
        data = archives.read(out)
        import io
        import tarfile

        with tarfile.open(out, "w:gz") as tar:
            for name, body in [
                ("manifest.json", data.manifest_bytes),
                ("manifest.sig", verified.signature),
                *sorted(data.members.items()),
            ]:
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return out


def _faster(members):
    name = next(n for n in members if n.endswith("result.json"))
    result = json.loads(members[name])
    result["samples"]["total_img_per_s"] = [90.0, 100.0, 110.0]
    result["throughput"]["total_img_per_s"] = 100.0
    members[name] = json.dumps(result).encode()


def test_an_edited_number_breaks_the_signature_even_with_a_recomputed_manifest(tmp_path, site_key):
    key, allowed = site_key
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()], sign_key=key)
    tampered = _tampered(archive, tmp_path, _faster)
    assert archives.read(tampered).members != archives.read(archive).members  # self-consistent again
    for extra in ([], ["--allowed-signers", str(allowed)]):
        proc = fabric_bench("replay", str(tampered), "--dry-run", *extra)
        assert proc.returncode == 2 and "its signature does not verify" in proc.stderr, proc.stderr
    compared = fabric_bench("compare", str(archive), str(tampered))
    assert compared.returncode == 2 and "its signature does not verify" in compared.stderr


def test_a_stripped_signature_reads_unsigned_and_require_signed_refuses_it(tmp_path, site_key):
    key, allowed = site_key
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()], sign_key=key)
    stripped = _tampered(archive, tmp_path, _faster, resign_key=None)
    stripped_unsigned = tmp_path / "unsigned.tar.gz"
    archives.write(dict(archives.read(stripped).members), stripped_unsigned)
    shown = fabric_bench("replay", str(stripped_unsigned), "--dry-run")
    assert shown.returncode == 0 and ": unsigned" in shown.stdout
    refused = fabric_bench(
        "replay", str(stripped_unsigned), "--dry-run", "--allowed-signers", str(allowed), "--require-signed"
    )
    assert refused.returncode == 2 and "is unsigned; refused (--require-signed)" in refused.stderr


def test_a_key_the_site_does_not_trust_is_refused_when_signatures_are_required(tmp_path, site_key):
    _, allowed = site_key
    other = tmp_path / "mallory.key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    archive = write_archive(tmp_path / "m.tar.gz", [hostile_result()], sign_key=other)
    proc = fabric_bench("replay", str(archive), "--dry-run", "--allowed-signers", str(allowed), "--require-signed")
    assert proc.returncode == 2 and "which" in proc.stderr and "does not list; refused" in proc.stderr
    assert fabric_bench("replay", str(archive), "--dry-run", "--require-signed").returncode == 2  # needs the list


def test_a_signature_made_for_another_purpose_does_not_verify(tmp_path, site_key):
    """ssh-keygen signatures carry a namespace: a git commit signature of the same bytes is not ours."""
    key, _ = site_key
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()])
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(archives.read(archive).manifest_bytes)
    subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", "git", str(manifest)], check=True)
    verified = archives.read(archive)
    verified.signature = (tmp_path / "manifest.json.sig").read_bytes()
    assert NAMESPACE != "git"
    with pytest.raises(UsageError, match="its signature does not verify"):
        verified.provenance()
