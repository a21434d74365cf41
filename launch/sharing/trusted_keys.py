"""The site keys a user trusts, and the ones revoked: two OpenSSH files, checked by `ssh-keygen -Y`.

    allowed signers   OpenSSH's format, one line per site key: `site-a ssh-ed25519 AAAA...`
                      (the principal names the site: `site-a`, or `site-a@example.org`; options
                      such as valid-before="20270101" are OpenSSH's own)
    revoked keys      one public key per line (`ssh-ed25519 AAAA... comment`), '#' comments; the
                      keys no signature is accepted from any more, whoever lists them

`verify(data, signature)` returns who signed, or refuses in one line (UsageError): unsigned; not an
OpenSSH signature of this bundle's namespace; signed by a revoked key; signed by a key the
allowed signers do not list; a signature that does not verify (the data changed after signing).
The signing key is read from the signature itself (the SSHSIG format) to name it and to check
it against the revoked keys; ssh-keygen then verifies with the revoked list too (`-r`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from containers.untrusted import UntrustedInput, read_file
from launch.errors import UsageError
from launch.provenance.signing import MAX_SIGNATURE_BYTES, NAMESPACE
from launch.shapes import terminal

KEYS_MAX_BYTES = 1 << 20
SIGNATURE_MAX_BYTES = MAX_SIGNATURE_BYTES
TIMEOUT_S = 30
ARMOR_BEGIN, ARMOR_END = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"


@dataclass(frozen=True)
class Signed:
    principal: str  # the allowed-signers line whose key verified
    fingerprint: str  # SHA256:... of that key


def fingerprint_of(key_blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob (as `ssh-keygen -l` prints it)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def _strings(data: bytes, count: int) -> list[bytes]:
    """`count` SSH wire strings (uint32 length + bytes) from the start of data."""
    found, at = [], 0
    for _ in range(count):
        if at + 4 > len(data):
            raise ValueError("truncated")
        (length,) = struct.unpack(">I", data[at : at + 4])
        if at + 4 + length > len(data):
            raise ValueError("truncated")
        found.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    return found


def signature_key(signature: bytes, where: str) -> str:
    """The fingerprint of the key that made an armored SSHSIG signature of this bundle's namespace."""
    try:
        text = signature.decode("ascii").strip()
        if not (text.startswith(ARMOR_BEGIN) and text.endswith(ARMOR_END)) or len(signature) > SIGNATURE_MAX_BYTES:
            raise ValueError("not armored")
        raw = base64.b64decode("".join(text[len(ARMOR_BEGIN) : -len(ARMOR_END)].split()), validate=True)
        if raw[:6] != b"SSHSIG":
            raise ValueError("no SSHSIG magic")
        key, namespace = _strings(raw[10:], 2)
    except (UnicodeDecodeError, ValueError, binascii.Error):
        raise UsageError(f"{where}: its signature is not an OpenSSH signature: refused") from None
    if namespace != NAMESPACE.encode():
        raise UsageError(
            f"{where}: signed for {terminal(namespace.decode(errors='replace'))[:40]!r}, not {NAMESPACE}: refused"
        )
    return fingerprint_of(key)


def _key_lines(path: Path, what: str) -> list[str]:
    try:
        text = read_file(path, KEYS_MAX_BYTES, what).decode("utf-8")
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def revoked_fingerprints(path: Path) -> set[str]:
    """The fingerprints of a revoked-keys file's keys (one public key per line)."""
    found = set()
    for number, line in enumerate(_key_lines(path, "revoked keys file"), 1):
        fields = line.split()
        try:
            found.add(fingerprint_of(base64.b64decode(fields[1], validate=True)))
        except (IndexError, binascii.Error):
            raise UsageError(f"revoked keys file {path}, line {number}: not `TYPE BASE64 [comment]`") from None
    return found


class TrustedKeys:
    def __init__(self, allowed_signers: Path, revoked: Path | None = None):
        self.allowed_signers, self.revoked = Path(allowed_signers), Path(revoked) if revoked else None
        if not _key_lines(self.allowed_signers, "allowed signers file"):
            raise UsageError(f"allowed signers file {self.allowed_signers} lists no key")
        self.revoked_keys = revoked_fingerprints(self.revoked) if self.revoked else set()
        tool = shutil.which("ssh-keygen")
        if tool is None:
            raise UsageError("ssh-keygen not found: verifying signatures needs OpenSSH's client tools")
        self.tool = tool

    def _run(self, argv: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        try:
            if data is None:
                return subprocess.run(
                    [self.tool, *argv], stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S
                )
            return subprocess.run([self.tool, *argv], input=data, capture_output=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"ssh-keygen failed: {exc}") from None

    def verify(self, data: bytes, signature: bytes | None, where: str) -> Signed:
        if signature is None:
            raise UsageError(f"{where} is unsigned: refused")
        key = signature_key(signature, where)
        if key in self.revoked_keys:
            raise UsageError(f"{where} is signed by revoked key {key} (listed in {self.revoked}): refused")
        with tempfile.TemporaryDirectory(prefix="fabric-bench-trust.") as folder:
            sig = Path(folder) / "manifest.sig"
            sig.write_bytes(signature)
            found = self._run(["-Y", "find-principals", "-s", str(sig), "-f", str(self.allowed_signers)])
            principals = found.stdout.decode(errors="replace").split() if found.returncode == 0 else []
            if not principals:
                raise UsageError(f"{where} is signed by key {key}, which {self.allowed_signers} does not list: refused")
            revoked = ["-r", str(self.revoked)] if self.revoked else []
            for principal in principals:
                checked = self._run(
                    ["-Y", "verify", "-f", str(self.allowed_signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig)]
                    + revoked,
                    data,
                )
                if checked.returncode == 0:
                    return Signed(principal, key)
        raise UsageError(
            f"{where}: its signature by key {key} does not verify (the archive's manifest changed after signing): refused"
        )
