"""What was pulled from other sites: one record per pulled archive, kept beside it in the store.

Layout, under the results store's folder (the folder of launch.results.store.store_path(),
i.e. $FABRIC_BENCH_STORE's, else ~/.cache/fabric-bench/):

    pulled/<archive sha256 hex>/archive.tar.gz     the archive as pulled (its sha256 is the folder's name)
    pulled/<archive sha256 hex>/results/...        its results/ members, as the archive holds them
    pulled/<archive sha256 hex>/system.json        its system description (the artifact's second layer)
    pulled/<archive sha256 hex>/pulled.json        this record (RECORD), written last

A folder without pulled.json is an import that did not finish: `pulled_in` leaves it out.
Every result.json under results/ is in the results store (keyed by its origin, with the site
that signed it as the row's `pulled_from`); paths in
pulled.json are relative to its folder, so the store can move.

    pulled_in(store_folder)  -> [Pulled, ...]   oldest first
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from containers.untrusted import UntrustedInput, read_json
from launch.errors import UsageError
from launch.results.store import PULLED_FOLDER, PULLED_RECORD, store_path

FOLDER = PULLED_FOLDER  # the store reads it too: a row under it was pulled (launch.results.store)
RECORD = PULLED_RECORD
ARCHIVE = "archive.tar.gz"
SYSTEM = "system.json"
RECORD_VERSION = 1
RECORD_MAX_BYTES = 4 * 2**20
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Pulled:
    """One archive pulled from a registry, verified and imported."""

    site: str  # the publishing site (the artifact's org.fabric-bench.site, checked against the archive)
    origin: str  # its results' origin(s) as the store keys them ('host@commit'; several: comma-joined)
    signer: str  # the principal of the allowed-signers line whose key verified the signature
    manifest_digest: str  # sha256:... of the artifact's manifest
    archive_digest: str  # sha256:... of the archive (the artifact's archive layer)
    reference: str  # REGISTRY/REPO@sha256:MANIFEST, what was pulled
    result_paths: tuple[Path, ...]  # each imported result.json (absolute, resolved)
    archive_path: Path  # the pulled archive (absolute, resolved)
    system_path: Path | None  # its system description (absolute, resolved), when the artifact carried one
    stack_digests: tuple[str, ...] = ()  # the stack digests its results ran on (the annotation's)
    annotations: dict[str, str] = field(default_factory=dict)  # the manifest's annotations, checked
    pulled_unix: float = 0.0

    def as_record(self, folder: Path) -> dict:
        """pulled.json's content, paths relative to `folder`."""
        return {
            "record_version": RECORD_VERSION,
            "site": self.site,
            "origin": self.origin,
            "signer": self.signer,
            "manifest_digest": self.manifest_digest,
            "archive_digest": self.archive_digest,
            "reference": self.reference,
            "result_paths": [p.relative_to(folder).as_posix() for p in self.result_paths],
            "archive_path": self.archive_path.relative_to(folder).as_posix(),
            "system_path": self.system_path.relative_to(folder).as_posix() if self.system_path else None,
            "stack_digests": list(self.stack_digests),
            "annotations": dict(sorted(self.annotations.items())),
            "pulled_unix": self.pulled_unix,
        }


def pulled_folder(store_folder: Path | None = None) -> Path:
    """Where pulled archives live: FOLDER under the store's folder."""
    if store_folder is None:
        store_folder = store_path().parent
    return Path(store_folder) / FOLDER


def write_record(pulled: Pulled, folder: Path) -> Path:
    """pulled.json in `folder` (written whole under a temporary name, then renamed)."""
    folder = Path(folder).resolve()
    target = folder / RECORD
    partial = target.with_name(RECORD + ".partial")
    partial.write_text(json.dumps(pulled.as_record(folder), indent=2) + "\n")
    partial.replace(target)
    return target


def _inside(folder: Path, relative: object, what: str) -> Path:
    if not isinstance(relative, str) or not relative or relative.startswith("/") or "\x00" in relative:
        raise UsageError(f"{folder / RECORD}: {what} {relative!r} is not a relative path")
    found = (folder / relative).resolve()
    if ".." in PurePosixPath(relative).parts or folder not in found.parents:
        raise UsageError(f"{folder / RECORD}: {what} {relative!r} leaves its folder")
    return found


def _text(record: dict, key: str, where: Path) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.isprintable():
        raise UsageError(f"{where}: {key} is not one line of text")
    return value


def read_record(folder: Path) -> Pulled:
    """The Pulled of one folder under pulled/ (its pulled.json, checked by type)."""
    folder = Path(folder).resolve()
    where = folder / RECORD
    try:
        record = read_json(where, RECORD_MAX_BYTES, "pulled record")
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(record, dict) or record.get("record_version") != RECORD_VERSION:
        raise UsageError(f"{where}: not a pulled record of version {RECORD_VERSION}")
    digests = {key: _text(record, key, where) for key in ("manifest_digest", "archive_digest")}
    for key, value in digests.items():
        if not DIGEST.fullmatch(value):
            raise UsageError(f"{where}: {key} {value!r} is not sha256:<64 hex>")
    paths, stacks, annotations = record.get("result_paths"), record.get("stack_digests"), record.get("annotations")
    if not isinstance(paths, list) or not isinstance(stacks, list) or not isinstance(annotations, dict):
        raise UsageError(f"{where}: result_paths, stack_digests or annotations has the wrong type")
    system = record.get("system_path")
    pulled_unix = record.get("pulled_unix")
    return Pulled(
        site=_text(record, "site", where),
        origin=_text(record, "origin", where),
        signer=_text(record, "signer", where),
        manifest_digest=digests["manifest_digest"],
        archive_digest=digests["archive_digest"],
        reference=_text(record, "reference", where),
        result_paths=tuple(_inside(folder, p, "result path") for p in paths),
        archive_path=_inside(folder, record.get("archive_path"), "archive path"),
        system_path=_inside(folder, system, "system path") if system is not None else None,
        stack_digests=tuple(str(s) for s in stacks),
        annotations={str(k): str(v) for k, v in annotations.items()},
        pulled_unix=float(pulled_unix) if isinstance(pulled_unix, (int, float)) else 0.0,
    )


def pulled_in(store_folder: Path | None = None) -> list[Pulled]:
    """Every finished pull under the store's folder, oldest first."""
    root = pulled_folder(store_folder)
    if not root.is_dir():
        return []
    found = [read_record(folder) for folder in sorted(root.iterdir()) if (folder / RECORD).is_file()]
    return sorted(found, key=lambda pulled: (pulled.pulled_unix, pulled.archive_digest))
