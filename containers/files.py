"""Writing and fingerprinting the bundle's own files, one of each: an atomic
JSON writer, sha256 of bytes and of files, and the checkout's git state.

Used on the host by containers/ and launch/ (launch imports containers; bench/,
which runs inside images, needs none of it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def write_json_atomic(path: Path, data, *, indent: int = 2) -> Path:
    """Write data as JSON under path via a temporary sibling and a rename, so a
    reader never sees half a file (the temporary name is unique per process)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=indent, sort_keys=True, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


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
