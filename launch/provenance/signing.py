"""Signed provenance for archives: OpenSSH signatures (`ssh-keygen -Y`), the way git signs commits.

A site signs with a key it already has, or makes one in one command
(`ssh-keygen -t ed25519 -f site-a.key -N ''`); the signature covers the archive's
manifest, which holds the sha256 of every member, so no member can change without
breaking it. A site that receives the archive lists the keys it trusts in an OpenSSH
allowed-signers file (one line per signer: `site-a@example.org ssh-ed25519 AAAA...`).

    sign(manifest, key)                      -> the signature (armored text)
    check(manifest, signature, allowed)      -> who signed (principal, or the key's fingerprint)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from launch.errors import UsageError

NAMESPACE = "fabric-bench-archive"  # a signature made for something else does not verify here
IMAGE_NAMESPACE = "fabric-bench-image"  # image reference files (launch/provenance/images.py)
TIMEOUT_S = 30
MAX_SIGNATURE_BYTES = 1 << 16  # an armored SSHSIG is under 1 KiB


@dataclass(frozen=True)
class Provenance:
    signed: bool
    trusted: bool  # verified against an allowed-signers file
    signer: str | None = None  # principal (trusted) or key fingerprint (not checked against a list)

    def line(self) -> str:
        if not self.signed:
            return "unsigned"
        if self.trusted:
            return f"signed by {self.signer} (verified against the allowed signers)"
        return f"signed by key {self.signer} (signature valid; not checked against allowed signers)"


def _ssh_keygen() -> str:
    tool = shutil.which("ssh-keygen")
    if tool is None:
        raise UsageError("ssh-keygen not found: signing and verifying archives need OpenSSH's client tools")
    return tool


def _run(argv: list[str], data: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, input=data, capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{argv[0]} failed: {exc}") from None


def sign(data: bytes, key: Path, namespace: str = NAMESPACE) -> bytes:
    """The signature of `data` by the private key at `key` (an OpenSSH key file)."""
    key = Path(key)
    if not key.is_file():
        raise UsageError(f"signing key {key} not found")
    with tempfile.TemporaryDirectory(prefix="fabric-bench-sign.") as folder:
        target = Path(folder) / "manifest.json"
        target.write_bytes(data)
        out = _run([_ssh_keygen(), "-Y", "sign", "-q", "-f", str(key), "-n", namespace, str(target)])
        signature = Path(str(target) + ".sig")
        if out.returncode != 0 or not signature.is_file():
            raise UsageError(f"cannot sign with {key}: {_first_line(out)}")
        return signature.read_bytes()


def check(
    data: bytes,
    signature: bytes | None,
    allowed_signers: Path | None = None,
    require_trusted: bool = False,
    where: str = "archive",
    namespace: str = NAMESPACE,
) -> Provenance:
    """Who signed `data`; a signature that does not verify is refused, always. With
    `require_trusted`, so is an unsigned archive or one whose signer the allowed signers lack."""
    if require_trusted and allowed_signers is None:
        raise UsageError("--require-signed needs --allowed-signers FILE (the keys this site trusts)")
    if signature is None:
        if require_trusted:
            raise UsageError(f"{where} is unsigned; refused (--require-signed)")
        return Provenance(signed=False, trusted=False)
    with tempfile.TemporaryDirectory(prefix="fabric-bench-verify.") as folder:
        sig = Path(folder) / "manifest.sig"
        sig.write_bytes(signature)
        tool = _ssh_keygen()
        checked = _run([tool, "-Y", "check-novalidate", "-n", namespace, "-s", str(sig)], data)
        if checked.returncode != 0:
            raise UsageError(
                f"{where}: its signature does not verify (the manifest was changed after signing, "
                f"or the signature is not one): refused"
            )
        match = re.search(
            r"(SHA256:[A-Za-z0-9+/=]+)",
            checked.stdout.decode(errors="replace") + checked.stderr.decode(errors="replace"),
        )
        fingerprint = match.group(1) if match else "unknown"
        if allowed_signers is None:
            return Provenance(signed=True, trusted=False, signer=fingerprint)
        allowed = Path(allowed_signers)
        if not allowed.is_file():
            raise UsageError(f"allowed signers file {allowed} not found")
        found = _run([tool, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed)])
        principals = found.stdout.decode(errors="replace").split()
        for principal in principals:
            verified = _run(
                [tool, "-Y", "verify", "-f", str(allowed), "-I", principal, "-n", namespace, "-s", str(sig)], data
            )
            if verified.returncode == 0:
                return Provenance(signed=True, trusted=True, signer=principal)
        if require_trusted:
            raise UsageError(f"{where} is signed by key {fingerprint}, which {allowed} does not list; refused")
        return Provenance(signed=True, trusted=False, signer=fingerprint)


def _first_line(out: subprocess.CompletedProcess) -> str:
    text = (out.stderr or out.stdout or b"").decode(errors="replace").strip()
    return text.splitlines()[0] if text else f"exit code {out.returncode}"
