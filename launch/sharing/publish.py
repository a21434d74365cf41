"""Publishing: a signed results archive pushed to an OCI registry as a results artifact.

    publish(archive, "REGISTRY[/REPO]")                    -> Published (REGISTRY/REPO@sha256:...)
    archive_and_publish(directory, target, sign_key, ...)  the archive made and signed first

The archive is read and checked as any reader would (launch.provenance.archive.read), and must
be signed with a signature that verifies: an unsigned archive would be refused by every site that
pulls it, so it is refused here. Its blobs go up first (the empty config, the archive, its system
description, its signed manifest: what a puller verifies before it fetches the archive), then the
manifest (launch.sharing.artifact) under a tag of its own,
SITE-YYYYMMDDTHHMMSSZ-<archive digest, 12 hex>, so a repository lists every published archive.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from launch.errors import UsageError
from launch.provenance import archive as archives
from launch.provenance import signing
from launch.sharing import annotations as notes
from launch.sharing import artifact, registry
from launch.sharing.trusted_keys import signature_key

ARCHIVE_NAME = "results.tar.gz"


@dataclass(frozen=True)
class Published:
    reference: str  # REGISTRY/REPO@sha256:MANIFEST: what another site pulls
    tag: str
    manifest_digest: str
    archive_digest: str
    annotations: dict[str, str]


def tag_of(annotations: dict[str, str], archive_digest: str) -> str:
    """SITE-YYYYMMDDTHHMMSSZ-<12 hex>: unique per archive, readable in a tag list."""
    stamp = annotations[notes.CREATED].replace("-", "").replace(":", "")
    return f"{annotations[notes.SITE]}-{stamp}-{archive_digest.removeprefix('sha256:')[:12]}"[:128]


def publish(archive_path: Path, target: str, insecure: bool = False) -> Published:
    """Push a signed archive to REGISTRY[/REPO] (launch.sharing.registry.DEFAULT_REPOSITORY when no REPO)."""
    repository, pinned = registry.at(target, insecure)
    if pinned:
        raise UsageError(f"publish to a repository (REGISTRY/REPO), not a digest: {target}")
    archive_path = Path(archive_path)
    verified = archives.read(archive_path)
    where = f"archive {archive_path}"
    if verified.signature is None:
        raise UsageError(
            f"{where} is unsigned: refused (sign it: fabric-bench archive DIR --output FILE --sign-key KEY, "
            "or publish the directory with --sign-key KEY)"
        )
    signing.check(verified.manifest_bytes, verified.signature, where=where)  # a broken signature: refused
    return push(repository, archive_path, verified)


def push(repository: registry.Registry, archive_path: Path, verified: archives.Archive) -> Published:
    """The artifact of a read, signed archive pushed as it is (`publish` checks its signature
    first; a forger with write access to the registry skips that, benchmarks/three_sites.py too)."""
    where = f"archive {archive_path}"
    if verified.signature is None:
        raise UsageError(f"{where} is unsigned: refused")
    described = notes.of_archive(verified, signature_key(verified.signature, where))
    _, system = notes.system_description(verified)
    size = archive_path.stat().st_size
    if size > artifact.MAX_ARCHIVE_BYTES:
        raise UsageError(f"{where} is {size} bytes, over the {artifact.MAX_ARCHIVE_BYTES} a reader accepts")
    archive_blob = artifact.Blob(
        artifact.ARCHIVE_TYPE, registry.file_digest(archive_path), size, artifact.ARCHIVE_TITLE
    )
    system_blob = artifact.Blob(
        artifact.SYSTEM_TYPE, registry.sha256_digest(system), len(system), artifact.SYSTEM_TITLE
    )
    signed = artifact.signed_manifest(verified.manifest_bytes, verified.signature)
    signed_blob = artifact.Blob(
        artifact.SIGNED_TYPE, registry.sha256_digest(signed), len(signed), artifact.SIGNED_TITLE
    )
    repository.push_blob(artifact.EMPTY_DATA, artifact.EMPTY.digest)
    repository.push_blob(archive_path, archive_blob.digest)
    repository.push_blob(system, system_blob.digest)
    repository.push_blob(signed, signed_blob.digest)
    tag = tag_of(described, archive_blob.digest)
    digest = repository.put_manifest(tag, artifact.manifest(archive_blob, system_blob, described, signed_blob))
    return Published(repository.pinned(digest), tag, digest, archive_blob.digest, described)


def archive_and_publish(
    directory: Path,
    target: str,
    sign_key: Path,
    *,
    site: Path | None = None,
    experiment: Path | None = None,
    system_name: str | None = None,
    submitter: str = "",
    keep: Path | None = None,
    insecure: bool = False,
) -> Published:
    """Archive a run or sweep directory (launch.provenance.archive.collect), sign it with
    `sign_key`, and publish it; the archive is kept at `keep` when given."""
    registry.at(target, insecure)  # a bad reference is refused before the archive is collected
    members = archives.collect(
        directory, site=site, experiment=experiment, system_name=system_name, submitter=submitter
    )
    with tempfile.TemporaryDirectory(prefix="fabric-bench-publish.") as work:
        output = Path(keep) if keep else Path(work) / ARCHIVE_NAME
        archives.write(members, output, sign_key)
        return publish(output, target, insecure)
