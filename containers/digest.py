"""sha256 of files; for big images, remembered.

A 4 GiB image takes ~20-50 s to hash on two cores, and every run records the
digest of its image. `remembered_sha256` keeps the digest of each file under
CACHE/digests.json, keyed by its real path, inode, size and mtime: a file that
changed in any of these is hashed again. An unwritable cache only costs the
re-hash.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _identity(path: Path) -> str:
    st = path.stat()
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def remembered_sha256(path: str | os.PathLike, cache: Path) -> str:
    real = Path(path).resolve()
    store = cache / "digests.json"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    entry = known.get(str(real))
    identity = _identity(real)
    if entry and entry.get("identity") == identity:
        return entry["sha256"]
    value = sha256_file(real)
    known[str(real)] = {"identity": identity, "sha256": value}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = store.with_suffix(f".json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        os.replace(tmp, store)
    except OSError:
        pass
    return value
