"""The site keys a user trusts, and the ones revoked: two OpenSSH files, checked by `ssh-keygen -Y`.

    allowed signers   OpenSSH's format, one line per site key: `site-a ssh-ed25519 AAAA...`
                      (the principal names the site: `site-a`, or `site-a@example.org`; options
                      such as valid-before="20270101" are OpenSSH's own)
    revoked keys      one public key per line (`ssh-ed25519 AAAA... comment`), '#' comments; the
                      keys no signature is accepted from any more, whoever lists them. A line may
                      begin `revoked-since=YYYY-MM-DD `: an archive this site had pulled (pinned by
                      its digest) before that day is still accepted when pulled again; nothing
                      else the key signed is (without a date: nothing at all)

`verify(data, signature)` returns who signed, or refuses in one line (UsageError): unsigned; not an
OpenSSH signature of this bundle's namespace; signed by a revoked key; signed by a key the
allowed signers do not list; a signature that does not verify (the data changed after signing).
The signing key is read from the signature itself (the SSHSIG format) to name it and to check
it against the revoked keys; ssh-keygen then verifies with the revoked list too (`-r`).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import re
import shutil
import struct
import subprocess
import tempfile
import time
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


REVOKED_SINCE = re.compile(r"revoked-since=(\d{4}-\d\d-\d\d)")


def revoked_fingerprints(path: Path) -> dict[str, float | None]:
    """Each revoked key's fingerprint, and the day (Unix seconds, UTC midnight) its revocation
    took effect, None when the line gives none (a revocation of everything it ever signed)."""
    found: dict[str, float | None] = {}
    for number, line in enumerate(_key_lines(path, "revoked keys file"), 1):
        fields = line.split()
        since = REVOKED_SINCE.fullmatch(fields[0]) if fields else None
        try:
            day = calendar.timegm(time.strptime(since.group(1), "%Y-%m-%d")) if since else None
            found[fingerprint_of(base64.b64decode(fields[2 if since else 1], validate=True))] = day
        except (IndexError, ValueError, binascii.Error):
            raise UsageError(
                f"revoked keys file {path}, line {number}: not `[revoked-since=YYYY-MM-DD] TYPE BASE64 [comment]`"
            ) from None
    return found


class TrustedKeys:
    def __init__(self, allowed_signers: Path, revoked: Path | None = None):
        self.allowed_signers, self.revoked = Path(allowed_signers), Path(revoked) if revoked else None
        if not _key_lines(self.allowed_signers, "allowed signers file"):
            raise UsageError(f"allowed signers file {self.allowed_signers} lists no key")
        self.revoked_keys = revoked_fingerprints(self.revoked) if self.revoked else {}
        tool = shutil.which("ssh-keygen")
        if tool is None:
            raise UsageError("ssh-keygen not found: verifying signatures needs OpenSSH's client tools")
        self.tool = tool

    def _revoked_key_lines(self) -> list[str]:
        lines = _key_lines(self.revoked, "revoked keys file") if self.revoked else []
        return [REVOKED_SINCE.sub("", line, count=1).strip() for line in lines]

    def _run(self, argv: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
        try:
            if data is None:
                return subprocess.run(
                    [self.tool, *argv], stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S
                )
            return subprocess.run([self.tool, *argv], input=data, capture_output=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"ssh-keygen failed: {exc}") from None

    def verify(self, data: bytes, signature: bytes | None, where: str, pinned_unix: float | None = None) -> Signed:
        """Who signed `data`; `pinned_unix`: when this site first pulled this very archive (its
        digest), which a dated revocation of the key lets through if it came before the date."""
        if signature is None:
            raise UsageError(f"{where} is unsigned: refused")
        key = signature_key(signature, where)
        if key in self.revoked_keys:
            since = self.revoked_keys[key]
            if since is None or pinned_unix is None or pinned_unix >= since:
                raise UsageError(f"{where} is signed by revoked key {key} (listed in {self.revoked}): refused")
            return self._verified(data, signature, where, key, revoked=False)
        return self._verified(data, signature, where, key, revoked=self.revoked is not None)

    def _verified(self, data: bytes, signature: bytes, where: str, key: str, revoked: bool) -> Signed:
        with tempfile.TemporaryDirectory(prefix="fabric-bench-trust.") as folder:
            sig = Path(folder) / "manifest.sig"
            sig.write_bytes(signature)
            found = self._run(["-Y", "find-principals", "-s", str(sig), "-f", str(self.allowed_signers)])
            principals = found.stdout.decode(errors="replace").split() if found.returncode == 0 else []
            if not principals:
                raise UsageError(f"{where} is signed by key {key}, which {self.allowed_signers} does not list: refused")
            keys_only = Path(folder) / "revoked.keys"  # ssh-keygen reads keys, not this file's dates
            keys_only.write_text("".join(f"{line}\n" for line in self._revoked_key_lines()))
            for principal in principals:
                checked = self._run(
                    ["-Y", "verify", "-f", str(self.allowed_signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig)]
                    + (["-r", str(keys_only)] if revoked else []),
                    data,
                )
                if checked.returncode == 0:
                    return Signed(principal, key)
        raise UsageError(
            f"{where}: its signature by key {key} does not verify (the archive's manifest changed after signing): refused"
        )
