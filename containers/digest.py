"""sha256 of files; for big images, remembered.

A 4 GiB image takes ~20-50 s to hash on two cores, and every run records the
digest of its image. `remembered_sha256` keeps the digest of each file under
CACHE/digests.json, keyed by its real path, inode, size and mtime: a file that
changed in any of these is hashed again. An unwritable cache only costs the
re-hash.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from containers.files import sha256_file, write_json_atomic


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
        write_json_atomic(store, known, indent=1)
    except OSError:
        pass
    return value
