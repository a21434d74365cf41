"""Content manifests of images, and what differs between two builds of one recipe.

A content manifest is every entry of an image's root filesystem: its path, its type and mode,
and its content's sha256 (a link: its target) — no times, no owners' names. Two builds whose
manifests are equal are the same stack, whatever their SIF digests (which also cover mtimes
and the SIF's own build-time header). `compare` gives the identical share and groups the
differing paths by their likely cause, so a site can tell "rebuilt" from "changed".

Times are left out everywhere: apptainer 1.4 writes the build time into the image's own label
file (`/.singularity.d/labels.json`, `org.label-schema.build-date`) and does not honour
SOURCE_DATE_EPOCH, so that file is recorded by the sha256 of its labels without that one.

A SIF's root filesystem is its squashfs partition (`apptainer sif list` gives its offset),
unpacked with squashfs-tools' `unsquashfs -o OFFSET` into a temporary folder.

A manifest saved at another site (`image verify --save`) travels instead of its image where
the image is large: `load` reads it as untrusted data, within bounds and by shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from containers.host import BuildError, runtime_binary
from containers.untrusted import UntrustedInput, read_json

# (cause, pattern on the path): the first that matches names the cause
CAUSES = (
    ("byte-compiled Python (.pyc: source mtimes, hash-seeded marshal order)", re.compile(r"\.pyc$")),
    ("build labels and metadata (build date)", re.compile(r"^/\.singularity\.d/")),
    ("package-manager logs and caches (dates)", re.compile(r"^/var/(log|cache)/|^/var/lib/(apt|dpkg)/")),
    ("linker cache (ldconfig)", re.compile(r"^/etc/ld\.so\.cache$|ldconfig")),
    ("pip install records (RECORD, direct_url.json, INSTALLER)", re.compile(r"\.dist-info/")),
    ("generated at install time (/etc)", re.compile(r"^/etc/")),
)
OTHER = "other"
MAX_BYTES = 64 << 20  # a stack image's manifest is ~8 MiB (68919 entries)
MAX_ENTRIES = 500_000
_PATH = re.compile(r"/[^\x00-\x1f\x7f]{1,4095}")
_ENTRY = re.compile(
    r"file [0-7]{4} (labels:)?[0-9a-f]{64}|dir [0-7]{4}|special [0-7]{4}"
    r"|link [0-7]{4} [^\x00-\x1f\x7f]{1,4096}"
)
LABELS_FILE = "/.singularity.d/labels.json"
TIME_LABELS = ("org.label-schema.build-date",)


def _labels_digest(path: Path) -> str:
    """sha256 of an image's labels without the build time (the file as is when it is not JSON)."""
    data = path.read_bytes()
    try:
        labels = json.loads(data)
    except ValueError:
        return hashlib.sha256(data).hexdigest()
    if isinstance(labels, dict):
        data = json.dumps({k: v for k, v in labels.items() if k not in TIME_LABELS}, sort_keys=True).encode()
    return "labels:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Comparison:
    total: int
    identical: int
    differing: dict[str, list[str]]  # cause -> paths (content or mode differ, or only in one)

    @property
    def share(self) -> float:
        return self.identical / self.total if self.total else 1.0

    def lines(self, limit: int = 5) -> list[str]:
        out = [f"identical: {self.identical} of {self.total} entries ({100 * self.share:.2f} %)"]
        for cause, paths in sorted(self.differing.items(), key=lambda kv: -len(kv[1])):
            out.append(
                f"  {len(paths):6d}  {cause}: " + ", ".join(paths[:limit]) + (" ..." if len(paths) > limit else "")
            )
        return out


def squashfs_offset(sif: Path) -> int:
    out = subprocess.run([runtime_binary("apptainer"), "sif", "list", str(sif)], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if "FS (Squashfs" in line:
            match = re.search(r"\|\s*(\d+)-\d+\s*\|", line)
            if match:
                return int(match.group(1))
    raise BuildError(f"{sif}: no squashfs partition in `apptainer sif list`")


def of_tree(root: Path) -> dict[str, str]:
    """{path: "type mode sha256-or-target"} of every entry under root."""
    entries = {}
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(folder) / name
            info = path.lstat()
            rel = "/" + str(path.relative_to(root))
            mode = f"{stat.S_IMODE(info.st_mode):04o}"
            if stat.S_ISLNK(info.st_mode):
                entries[rel] = f"link {mode} {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                entries[rel] = f"dir {mode}"
            elif stat.S_ISREG(info.st_mode) and rel == LABELS_FILE:
                entries[rel] = f"file {mode} {_labels_digest(path)}"
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256()
                with path.open("rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                entries[rel] = f"file {mode} {digest.hexdigest()}"
            else:
                entries[rel] = f"special {mode}"
    return entries


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on unpacking an image (perhaps another site's copy) to take its manifest, far
    above a real one (a stack image: ~69k entries, ~5 GiB): a SIF of a few KiB can hold a
    terabyte of sparse file, which unpacks sparse but is then hashed byte by byte."""

    entries: int = MAX_ENTRIES
    file_bytes: int = 64 << 30

    def check(self, sif: Path, offset: int) -> None:
        """Count what `unsquashfs -lls` lists (nothing unpacked; the listing is read as a stream
        and stopped at the first limit passed)."""
        entries = total = 0
        with subprocess.Popen(
            ["unsquashfs", "-n", "-lls", "-o", str(offset), str(sif)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
        ) as lister:
            assert lister.stdout is not None
            for line in lister.stdout:
                fields = line.split(None, 3)
                if len(fields) < 4 or fields[0][:1] not in "-dlcbps" or "/" not in fields[1]:
                    continue
                entries += 1
                total += int(fields[2]) if fields[0].startswith("-") and fields[2].isdigit() else 0
                if entries > self.entries or total > self.file_bytes:
                    lister.kill()
                    what = (
                        f"more than {self.entries} entries"
                        if entries > self.entries
                        else f"more than {self.file_bytes} bytes of files"
                    )
                    raise BuildError(f"{sif} unpacks to {what}; refused")
        if lister.returncode != 0:
            raise BuildError(f"{sif}: unsquashfs cannot list its root filesystem (exit {lister.returncode})")


def of_sif(sif: Path, scratch: Path | None = None, limits: UnpackLimits = UnpackLimits()) -> dict[str, str]:
    """The content manifest of a SIF (unpacked to a temporary folder, then removed), within limits."""
    sif = Path(sif)
    if not sif.is_file():
        raise BuildError(f"image not found: {sif}")
    offset = squashfs_offset(sif)
    limits.check(sif, offset)
    work = Path(tempfile.mkdtemp(prefix="fabric-bench-manifest.", dir=scratch))
    try:
        root = work / "root"
        out = subprocess.run(
            ["unsquashfs", "-q", "-n", "-no-xattrs", "-o", str(offset), "-d", str(root), str(sif)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise BuildError(f"unsquashfs of {sif} failed: {(out.stderr.strip().splitlines() or [''])[-1]}")
        return of_tree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cause(path: str) -> str:
    return next((name for name, pattern in CAUSES if pattern.search(path)), OTHER)


def compare(a: dict[str, str], b: dict[str, str]) -> Comparison:
    paths = set(a) | set(b)
    differing: dict[str, list[str]] = {}
    for path in sorted(paths):
        if a.get(path) != b.get(path):
            differing.setdefault(cause(path), []).append(path)
    return Comparison(len(paths), len(paths) - sum(map(len, differing.values())), differing)


def save(manifest: dict[str, str], path: Path) -> None:
    Path(path).write_text(json.dumps(manifest, indent=0, sort_keys=True) + "\n")


def load(path: Path) -> dict[str, str]:
    """A content manifest saved by `save` (perhaps at another site: `image verify --save` there),
    checked: a flat object within MAX_BYTES and MAX_ENTRIES, each path absolute inside the image
    (no `..`, `.` or empty part), each entry one of the shapes of_tree writes, no control
    character anywhere (the paths are printed)."""
    try:
        data = read_json(path, MAX_BYTES, "content manifest", max_depth=1)
    except UntrustedInput as exc:
        raise BuildError(str(exc)) from None
    if not isinstance(data, dict):
        raise BuildError(f"content manifest {path}: not an object of path -> entry")
    if len(data) > MAX_ENTRIES:
        raise BuildError(f"content manifest {path}: {len(data)} entries, over the {MAX_ENTRIES} limit; refused")
    for entry_path, entry in data.items():
        if not _PATH.fullmatch(entry_path) or any(part in ("", ".", "..") for part in entry_path.split("/")[1:]):
            raise BuildError(f"content manifest {path}: {entry_path!r:.80} is not a path inside an image")
        if not isinstance(entry, str) or not _ENTRY.fullmatch(entry):
            raise BuildError(
                f"content manifest {path}: the entry of {entry_path!r:.80} is not "
                "'file|dir|link|special MODE [sha256|target]'"
            )
    return data
