"""Trusted and revoked site keys: the signing key is read from the signature itself, as
`ssh-keygen -l` names it; a revoked key is refused even when the allowed signers still list it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.provenance import signing
from launch.sharing.trusted_keys import TrustedKeys, signature_key
from tests.sharing.conftest import site_key


def test_the_key_in_a_signature_is_the_one_ssh_keygen_names_and_revocation_wins(tmp_path: Path) -> None:
    key, line = site_key(tmp_path, "site-a")
    other, other_line = site_key(tmp_path, "site-b")
    data = b'{"members": {}}\n'
    signature = signing.sign(data, key)
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(key) + ".pub"], capture_output=True, text=True, check=True)
    assert signature_key(signature, "here") == listed.stdout.split()[1]
    allowed = tmp_path / "allowed"
    allowed.write_text(f"{line}\n{other_line}\n")
    assert TrustedKeys(allowed).verify(data, signature, "here").principal == "site-a"
    with pytest.raises(UsageError, match="does not verify"):
        TrustedKeys(allowed).verify(data + b" ", signature, "here")
    revoked = tmp_path / "revoked"
    revoked.write_text((tmp_path / "site-a.key.pub").read_text())
    with pytest.raises(UsageError, match="signed by revoked key SHA256:"):
        TrustedKeys(allowed, revoked).verify(data, signature, "here")
    assert TrustedKeys(allowed, revoked).verify(data, signing.sign(data, other), "here").principal == "site-b"


@pytest.mark.parametrize(
    "signature, words",
    [
        (b"not a signature", "is not an OpenSSH signature"),
        (b"-----BEGIN SSH SIGNATURE-----\n!!!!\n-----END SSH SIGNATURE-----\n", "is not an OpenSSH signature"),
        (b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n", "is not an OpenSSH"),
    ],
)
def test_a_signature_that_is_not_one_is_refused(signature: bytes, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        signature_key(signature, "here")


def test_a_signature_for_another_purpose_is_refused(tmp_path: Path) -> None:
    key, _ = site_key(tmp_path, "site-a")
    signature = signing.sign(b"x", key, namespace=signing.IMAGE_NAMESPACE)
    with pytest.raises(UsageError, match="signed for 'fabric-bench-image', not fabric-bench-archive"):
        signature_key(signature, "here")
