"""Writing and fingerprinting the bundle's own files, one of each: an atomic
writer (bytes or JSON), sha256 of bytes and of files, and the checkout's git state.

Used on the host by containers/ and launch/ (launch imports containers; bench/,
which runs inside images, needs none of it).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_atomic(path: Path, data: bytes | str, mode: int = 0o666) -> Path:
    """Write data under path via a new temporary sibling and a rename, so a reader never sees half
    a file. The sibling is created afresh (O_CREAT|O_EXCL|O_NOFOLLOW: never a file or link already
    there) and renamed over path, so a link planted at either name is replaced, never followed.
    mode as open() gives it, less the umask."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, flags, mode)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: Path, data, *, indent: int = 2) -> Path:
    """Write data as JSON under path (write_atomic)."""
    return write_atomic(path, json.dumps(data, indent=indent, sort_keys=True, default=str) + "\n")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git(*args: str, repo: Path = REPO) -> str:
    """`git -C repo ARGS` stdout, stripped; "" where git or the checkout is missing."""
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=20
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def bundle_commit() -> str:
    """The checkout's commit as `git describe` names it (marked -dirty with local edits)."""
    return git("describe", "--always", "--dirty", "--abbrev=12") or "unknown"
