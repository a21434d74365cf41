"""Pulling: list the results artifacts of a repository, pull the chosen ones by digest, verify
each completely, and import the verified results into the local store.

    published(repository)                    -> ([Listed, ...], [refusal line, ...])
    chosen(repository, digests, filters)     -> the Listed to pull
    pull(repository, chosen, keys, store)    -> [Pulled, ...]  (launch.sharing.pulled)

Everything pulled is foreign input and only ever read: the manifest (launch.sharing.artifact),
each blob against its digest and declared size (launch.sharing.registry), the archive member by
member within launch.trust.ArchiveLimits (launch.provenance.archive.read), its signature against
the keys the user trusts and revoked (launch.sharing.trusted_keys), each result against the
result schema, the system description layer against the archive's signed copy, every annotation
against what the signed archive says, the signer against the site (its principal names it), and
no result claiming this site's origin (launch.results.origins). The signed manifest is checked
first, before the archive is fetched (verify first, parse second), and what was pulled before
refuses a rollback (launch.sharing.freshness).

All or nothing: every chosen artifact is verified before any is imported, so one refusal (one
line, UsageError) leaves the store as it was. Imported, an archive lives under the store's
folder by its digest (the layout in launch.sharing.pulled) and each result is indexed in the
store, keyed by its origin and marked with the site that signed it (`pulled_from`). An archive
pulled before is not imported twice.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from launch.errors import UsageError
from launch.provenance import archive as archives
from launch.results import store
from launch.results.origins import refuse_claimed_origin
from launch.results.result import Result, ResultError, malformed, parse, typed
from launch.sharing import annotations as notes
from launch.sharing import artifact, freshness, pulled
from launch.sharing.registry import Registry, sha256_digest
from launch.sharing.trusted_keys import Signed, TrustedKeys
from launch.shapes import terminal
from launch.trust import ArchiveLimits


@dataclass(frozen=True)
class Listed:
    """One results artifact of a repository, as its manifest describes it (not yet verified)."""

    tag: str
    manifest_digest: str
    reference: str
    layout: artifact.Layout

    @property
    def annotations(self) -> dict[str, str]:
        return self.layout.annotations


@dataclass(frozen=True)
class Verified:
    listed: Listed
    folder: Path  # the incoming folder: the archive and the system description as pulled
    archive: archives.Archive
    signed: Signed
    site: str
    results: dict[str, Result]  # member name (results/...) -> result


def _listed(repository: Registry, reference: str, tag: str = "") -> Listed:
    digest, body = repository.manifest(reference)
    return Listed(tag, digest, repository.pinned(digest), artifact.layout(body, repository.pinned(digest)))


def published(repository: Registry) -> tuple[list[Listed], list[str]]:
    """Every results artifact in the repository (by tag, one per manifest), and one refusal line
    for each tag whose manifest is not one."""
    found: dict[str, Listed] = {}
    refused = []
    for tag in repository.tags():
        try:
            listed = _listed(repository, tag, tag)
        except UsageError as exc:
            refused.append(f"{repository.name}:{tag}: {exc}")
            continue
        found.setdefault(listed.manifest_digest, listed)
    return sorted(found.values(), key=lambda item: item.annotations.get(notes.CREATED, "")), refused


def chosen(repository: Registry, digests: list[str], filters: dict[str, str | None]) -> tuple[list[Listed], list[str]]:
    """(the artifacts to pull, one line for each tag skipped): those named by digest, else every
    one the filters match. A manifest under some tag that is not a results artifact is skipped
    with its line; it never stops the others (one named by digest is refused: it was asked for)."""
    if digests:
        return [
            item
            for item in (_listed(repository, d) for d in dict.fromkeys(digests))
            if notes.matches(item.annotations, filters)
        ], []
    listed, refused = published(repository)
    return [item for item in listed if notes.matches(item.annotations, filters)], refused


def listing(item: Listed) -> dict[str, str]:
    """What `results pull --list --json` shows of one artifact: this bundle's annotations (the
    publisher's claims, checked against the signed archive at pull), then the reference and tag
    this client pinned, which no annotation can replace."""
    claimed = {key: value for key, value in item.annotations.items() if key in (*notes.OURS, notes.CREATED)}
    return {**claimed, "reference": item.reference, "tag": item.tag, "manifest_digest": item.manifest_digest}


def _results(archive: archives.Archive, where: str) -> dict[str, Result]:
    """Every result.json of the archive, each of the result schema's shapes; any other refused."""
    found = {}
    for name, data in sorted(archive.members.items()):
        if name.startswith("results/") and PurePosixPath(name).name == "result.json":
            try:
                result = parse(data, f"{where}: {name}")
            except ResultError as exc:
                raise UsageError(f"{exc}: refused") from None
            if typed(result) is None:
                raise UsageError(f"{where}: {name} is malformed ({terminal(malformed(result))[:160]}): refused")
            found[name] = result
    if not found:
        raise UsageError(f"{where}: the archive holds no result: refused")
    return found


def signer_names_site(principal: str, site: str) -> bool:
    """The allowed-signers principal names the site: `site`, or `site@domain`."""
    return principal == site or principal.startswith(site + "@")


@dataclass(frozen=True)
class SignedFirst:
    """An artifact's signed manifest, verified before its archive is fetched."""

    signed: Signed
    site: str
    manifest_bytes: bytes
    signature: bytes
    limits: ArchiveLimits  # what reading the archive may hold: what the signed manifest lists


def verify_signed_manifest(
    repository: Registry, listed: Listed, keys: TrustedKeys, earlier: tuple[pulled.Pulled, ...] = ()
) -> SignedFirst:
    """Fetch the small signed-manifest layer and check its signature, its site and its signer:
    nothing of the archive is fetched or parsed until this passes. `earlier`: what this site
    pulled before (a key revoked since a date still signs what was pinned here before it)."""
    where, layout = listed.reference, listed.layout
    if layout.signed is None:
        raise UsageError(
            f"{where} carries no signed manifest (unsigned, or published in the old format, which would be "
            "parsed before its signature is checked): refused; ask its site to publish it again"
        )
    data = repository.fetch_small_blob(layout.signed.digest, layout.signed.size_bytes)
    manifest_bytes, signature = artifact.signed_parts(data, where)
    pinned = freshness.pinned_unix(earlier, layout.archive.digest)
    signed = keys.verify(manifest_bytes, signature, f"{where}: the archive", pinned)
    names, limits = archives.listed_limits(manifest_bytes, where)
    try:
        site = notes.site_named(names, f"{where}: the signed manifest")
    except UsageError as exc:
        raise UsageError(f"{exc}: refused") from None
    if not signer_names_site(signed.principal, site):
        raise UsageError(
            f"{where}: site {site} is signed by {terminal(signed.principal)[:80]}, whose allowed-signers line "
            "names another site: refused"
        )
    return SignedFirst(signed, site, manifest_bytes, signature, limits)


def verify(
    repository: Registry, listed: Listed, keys: TrustedKeys, incoming: Path, earlier: tuple[pulled.Pulled, ...] = ()
) -> Verified:
    """Verify one artifact's signed manifest, then fetch its blobs into `incoming` (an empty
    folder) and read the archive against it; any flaw is one line. `earlier`: what this site
    pulled before, against which a rollback is refused (launch.sharing.freshness)."""
    where, layout = listed.reference, listed.layout
    first = verify_signed_manifest(repository, listed, keys, earlier)
    signed = first.signed
    archive_path = repository.fetch_blob(layout.archive.digest, layout.archive.size_bytes, incoming / pulled.ARCHIVE)
    system_digest = None
    if layout.system is not None:
        system_path = repository.fetch_blob(layout.system.digest, layout.system.size_bytes, incoming / pulled.SYSTEM)
        system_digest = sha256_digest(system_path.read_bytes())
    try:
        archive = archives.read(archive_path, first.limits)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    if (archive.manifest_bytes, archive.signature) != (first.manifest_bytes, first.signature):
        raise UsageError(f"{where}: the archive's manifest or signature is not the signed-manifest layer's: refused")
    try:
        site, system = notes.system_description(archive)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}: refused") from None
    if system_digest is not None and system_digest != sha256_digest(system):
        raise UsageError(f"{where}: the system description layer is not the archive's signed one: refused")
    results = _results(archive, where)
    refuse_claimed_origin(results, site)  # a result speaks only for its signer (C-7)
    try:
        computed = notes.of_archive(archive, signed.fingerprint)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}: refused") from None
    differing = notes.differences(layout.annotations, computed)
    if differing:
        key = differing[0]
        raise UsageError(
            f"{where}: annotation {key} says {terminal(layout.annotations.get(key))[:80]!r}, the signed archive "
            f"{terminal(computed.get(key))[:80]!r}: refused"
        )
    run_ids = {result.run_id for result in results.values()}
    freshness.refuse_rollback(earlier, site, layout.archive.digest, computed.get(notes.CREATED, ""), run_ids, where)
    return Verified(listed, incoming, archive, signed, site, results)


def _import(verified: Verified, root: Path, db_path: Path) -> pulled.Pulled:
    """Move a verified artifact into place under `root` by its digest, write its results, index
    them as pulled from the site that signed them, and write its record last."""
    listed = verified.listed
    final = root / listed.layout.archive.digest.removeprefix("sha256:")
    if (final / pulled.RECORD).is_file():
        return pulled.read_record(final)
    if final.exists():  # an import that did not finish (no record): done again
        shutil.rmtree(final)
    paths = []
    for name, data in sorted(verified.archive.members.items()):
        if name.startswith("results/"):
            target = verified.folder / archives.safe_name(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:
                out.write(data)
    verified.folder.rename(final)
    db = store.connect(db_path)
    with db:
        for name, result in verified.results.items():
            path = final / archives.safe_name(name)
            store.index_result(db, path, result, pulled_from=verified.site)
            paths.append(path.resolve())
    db.close()
    origins = sorted({store.origin_of(result) for result in verified.results.values()})
    system = final / pulled.SYSTEM
    record = pulled.Pulled(
        site=verified.site,
        origin=",".join(origins),
        signer=verified.signed.principal,
        manifest_digest=listed.manifest_digest,
        archive_digest=listed.layout.archive.digest,
        reference=listed.reference,
        result_paths=tuple(paths),
        archive_path=(final / pulled.ARCHIVE).resolve(),
        system_path=system.resolve() if system.is_file() else None,
        stack_digests=notes.tokens(listed.annotations.get(notes.STACK_DIGEST, "")),
        annotations=dict(listed.annotations),
        pulled_unix=time.time(),
    )
    pulled.write_record(record, final)
    return record


def pull(
    repository: Registry, picked: list[Listed], keys: TrustedKeys, db_path: Path | None = None
) -> list[pulled.Pulled]:
    """Verify every picked artifact, then import them all (none, if one is refused)."""
    db_path = Path(db_path or store.store_path())
    root = pulled.pulled_folder(db_path.parent)
    root.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=root))
    try:
        checked = []
        earlier = tuple(pulled.pulled_in(db_path.parent))
        for number, listed in enumerate(picked):
            folder = incoming / str(number)
            folder.mkdir()
            checked.append(verify(repository, listed, keys, folder, earlier))
        return [_import(verified, root, db_path) for verified in checked]
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
