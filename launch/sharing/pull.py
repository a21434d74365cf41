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
against what the signed archive says, and the signer against the site (its principal names it).

All or nothing: every chosen artifact is verified before any is imported, so one refusal (one
line, UsageError) leaves the store as it was. Imported, an archive lives under the store's
folder by its digest (the layout in launch.sharing.pulled) and each result is indexed in the
store, keyed by its origin. An archive pulled before is not imported twice.
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
from launch.results.result import Result, ResultError, malformed, parse, typed
from launch.sharing import annotations as notes
from launch.sharing import artifact, pulled
from launch.sharing.registry import Registry, sha256_digest
from launch.sharing.trusted_keys import Signed, TrustedKeys
from launch.shapes import terminal


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


def chosen(repository: Registry, digests: list[str], filters: dict[str, str | None]) -> list[Listed]:
    """The artifacts to pull: those named by digest, else every one the filters match. A manifest
    that is not a results artifact refuses the whole choice (its line names it: pull the others by
    --digest)."""
    if digests:
        picked = [_listed(repository, digest) for digest in dict.fromkeys(digests)]
    else:
        listed, refused = published(repository)
        if refused:
            raise UsageError(refused[0] + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""))
        picked = listed
    return [item for item in picked if notes.matches(item.annotations, filters)]


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


def verify(repository: Registry, listed: Listed, keys: TrustedKeys, incoming: Path) -> Verified:
    """Fetch and verify one artifact into `incoming` (an empty folder); any flaw is one line."""
    where, layout = listed.reference, listed.layout
    archive_path = repository.fetch_blob(layout.archive.digest, layout.archive.size_bytes, incoming / pulled.ARCHIVE)
    system_digest = None
    if layout.system is not None:
        system_path = repository.fetch_blob(layout.system.digest, layout.system.size_bytes, incoming / pulled.SYSTEM)
        system_digest = sha256_digest(system_path.read_bytes())
    try:
        archive = archives.read(archive_path)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    signed = keys.verify(archive.manifest_bytes, archive.signature, f"{where}: the archive")
    try:
        site, system = notes.system_description(archive)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}: refused") from None
    if system_digest is not None and system_digest != sha256_digest(system):
        raise UsageError(f"{where}: the system description layer is not the archive's signed one: refused")
    results = _results(archive, where)
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
    if not signer_names_site(signed.principal, site):
        raise UsageError(
            f"{where}: site {site} is signed by {terminal(signed.principal)[:80]}, whose allowed-signers line "
            "names another site: refused"
        )
    return Verified(listed, incoming, archive, signed, site, results)


def _import(verified: Verified, root: Path, db_path: Path) -> pulled.Pulled:
    """Move a verified artifact into place under `root` by its digest, write its results, index
    them, and write its record last."""
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
            store.index_result(db, path, result)
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
        for number, listed in enumerate(picked):
            folder = incoming / str(number)
            folder.mkdir()
            checked.append(verify(repository, listed, keys, folder))
        return [_import(verified, root, db_path) for verified in checked]
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
