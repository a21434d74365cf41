"""The results artifact's layout: an OCI image manifest in the ORAS artifact convention.

    {
      "schemaVersion": 2,
      "mediaType": "application/vnd.oci.image.manifest.v1+json",
      "artifactType": "application/vnd.fabric-bench.results.v1+tar",
      "config": the empty descriptor (application/vnd.oci.empty.v1+json, "{}", 2 bytes),
      "layers": [
        the signed archive      application/vnd.fabric-bench.results.archive.v1.tar+gzip
        its system description  application/vnd.fabric-bench.system-description.v1+json
        its signed manifest     application/vnd.fabric-bench.results.signed-manifest.v1+json
      ],
      "annotations": launch.sharing.annotations
    }

The signed manifest is what a puller verifies before it fetches the archive (verify first, parse
second): {"manifest": the archive's manifest.json, "signature": its manifest.sig}, both as text,
byte for byte the archive's own. The manifest lists every member's sha256 and size and names the
site (its systems/<site>.json), so once its signature checks, the archive is read against it:
at most the members and bytes it lists. An artifact without it was published before this layer
existed: a puller refuses it in one line that says to publish it again.

Each layer carries `org.opencontainers.image.title` (results.tar.gz, system.json) so that `oras
pull` names the files; this bundle never uses a title as a path. The system description layer
holds the same bytes as the archive's signed systems/<site>.json member, so its digest is checked
against the archive's manifest after the pull.

`layout(manifest_bytes)` reads a manifest from a registry as foreign input: every field of its
declared type, digests of their form, sizes within MAX_ARCHIVE_BYTES / MAX_SYSTEM_BYTES, exactly
one archive layer, then at most one system layer and one signed-manifest layer, nothing else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from containers.untrusted import UntrustedInput, load_json
from launch.errors import UsageError
from launch.sharing import annotations as notes
from launch.sharing.registry import MANIFEST_MEDIA_TYPE, sha256_digest
from launch.shapes import terminal
from launch.trust import ArchiveLimits

ARTIFACT_TYPE = "application/vnd.fabric-bench.results.v1+tar"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_DATA = b"{}"
ARCHIVE_TYPE = "application/vnd.fabric-bench.results.archive.v1.tar+gzip"
SYSTEM_TYPE = "application/vnd.fabric-bench.system-description.v1+json"
SIGNED_TYPE = "application/vnd.fabric-bench.results.signed-manifest.v1+json"
TITLE = "org.opencontainers.image.title"
ARCHIVE_TITLE = "results.tar.gz"
SYSTEM_TITLE = "system.json"
SIGNED_TITLE = "signed-manifest.json"
MAX_ARCHIVE_BYTES = ArchiveLimits().total_bytes  # compressed, it is far smaller than unpacked
MAX_SYSTEM_BYTES = 1 << 20
MAX_SIGNED_BYTES = 4 << 20  # the archive's manifest (~100 bytes a member) and its signature
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MANIFEST_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Blob:
    media_type: str
    digest: str
    size_bytes: int
    title: str = ""

    def descriptor(self) -> dict:
        found: dict = {"mediaType": self.media_type, "digest": self.digest, "size": self.size_bytes}
        if self.title:
            found["annotations"] = {TITLE: self.title}
        return found


EMPTY = Blob(EMPTY_TYPE, sha256_digest(EMPTY_DATA), len(EMPTY_DATA))


@dataclass(frozen=True)
class Layout:
    """A results manifest, read and checked."""

    archive: Blob
    system: Blob | None
    annotations: dict[str, str]
    signed: Blob | None = None  # None: published before the signed-manifest layer


def signed_manifest(manifest_bytes: bytes, signature: bytes) -> bytes:
    """The signed-manifest layer's bytes: the archive's manifest.json and manifest.sig, as text."""
    body = {"manifest": manifest_bytes.decode("utf-8"), "signature": signature.decode("ascii")}
    return json.dumps(body, indent=2, sort_keys=True).encode() + b"\n"


def signed_parts(data: bytes, where: str) -> tuple[bytes, bytes]:
    """(manifest.json bytes, manifest.sig bytes) of a signed-manifest layer, read as foreign input."""
    try:
        body = load_json(data, f"{where}: the signed manifest", MAX_SIGNED_BYTES, max_depth=2)
    except UntrustedInput as exc:
        raise UsageError(str(exc) if str(exc).endswith("refused") else f"{exc}: refused") from None
    manifest_text = body.get("manifest") if isinstance(body, dict) else None
    signature = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(manifest_text, str) or not isinstance(signature, str) or set(body) != {"manifest", "signature"}:
        raise UsageError(f"{where}: the signed manifest is not {{manifest, signature}} as text: refused")
    try:
        return manifest_text.encode("utf-8"), signature.encode("ascii")
    except UnicodeEncodeError:
        raise UsageError(f"{where}: the signed manifest's text does not encode: refused") from None


def manifest(archive: Blob, system: Blob | None, annotations: dict[str, str], signed: Blob | None = None) -> bytes:
    """The manifest's bytes (what its digest is taken of)."""
    layers = [archive, *([system] if system else []), *([signed] if signed else [])]
    body = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": EMPTY.descriptor(),
        "layers": [layer.descriptor() for layer in layers],
        "annotations": annotations,
    }
    return json.dumps(body, indent=2, sort_keys=True).encode() + b"\n"


def _blob(found: object, where: str, largest: int) -> Blob:
    if not isinstance(found, dict):
        raise UsageError(f"{where} is not an object: refused")
    media_type, digest, size = found.get("mediaType"), found.get("digest"), found.get("size")
    if not isinstance(media_type, str) or not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise UsageError(f"{where}: no media type, or a digest not of the form sha256:<64 hex>: refused")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= largest:
        raise UsageError(f"{where}: size {terminal(repr(size))[:40]} is not a number of bytes 0..{largest}: refused")
    titles = notes.checked(found.get("annotations"), where, required=()) if "annotations" in found else {}
    return Blob(media_type, digest, size, titles.get(TITLE, ""))


def layout(data: bytes, where: str) -> Layout:
    """A manifest from a registry, checked as foreign input (UsageError, one line, if not one of ours)."""
    try:
        body = load_json(data, f"{where}: the manifest", MANIFEST_MAX_BYTES, max_depth=8)
    except UntrustedInput as exc:
        raise UsageError(str(exc) if str(exc).endswith("refused") else f"{exc}: refused") from None
    if not isinstance(body, dict) or body.get("schemaVersion") != 2:
        raise UsageError(f"{where}: not an OCI image manifest (schemaVersion 2): refused")
    if body.get("mediaType", MANIFEST_MEDIA_TYPE) != MANIFEST_MEDIA_TYPE or body.get("artifactType") != ARTIFACT_TYPE:
        kind = terminal(repr(body.get("artifactType")))[:80]
        raise UsageError(f"{where}: artifact type {kind} is not {ARTIFACT_TYPE}: refused")
    config = _blob(body.get("config"), f"{where}: config", MAX_SYSTEM_BYTES)
    if (config.media_type, config.digest, config.size_bytes) != (EMPTY.media_type, EMPTY.digest, EMPTY.size_bytes):
        raise UsageError(f"{where}: the config is not the empty descriptor ({EMPTY_TYPE}): refused")
    layers = body.get("layers")
    if not isinstance(layers, list) or not 1 <= len(layers) <= 3:
        raise UsageError(
            f"{where}: layers are not one archive, at most one system description and one signed manifest: refused"
        )
    largest = {ARCHIVE_TYPE: MAX_ARCHIVE_BYTES, SYSTEM_TYPE: MAX_SYSTEM_BYTES, SIGNED_TYPE: MAX_SIGNED_BYTES}
    kinds = [layer.get("mediaType") if isinstance(layer, dict) else None for layer in layers]
    if kinds[0] != ARCHIVE_TYPE or kinds[1:] not in ([], [SYSTEM_TYPE], [SIGNED_TYPE], [SYSTEM_TYPE, SIGNED_TYPE]):
        raise UsageError(f"{where}: layers are not [{ARCHIVE_TYPE}, {SYSTEM_TYPE}, {SIGNED_TYPE}]: refused")
    blobs = [
        _blob(layer, f"{where}: layer {n}", largest[str(kind)]) for n, (layer, kind) in enumerate(zip(layers, kinds), 1)
    ]
    by_kind = {blob.media_type: blob for blob in blobs}
    unknown = sorted(set(body) - {"schemaVersion", "mediaType", "artifactType", "config", "layers", "annotations"})
    if unknown:
        raise UsageError(f"{where}: the manifest has fields this layout lacks ({terminal(unknown[0])[:40]}): refused")
    return Layout(
        by_kind[ARCHIVE_TYPE],
        by_kind.get(SYSTEM_TYPE),
        notes.checked(body.get("annotations"), f"{where}: the manifest"),
        by_kind.get(SIGNED_TYPE),
    )
