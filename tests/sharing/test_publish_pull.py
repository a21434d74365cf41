"""Results through a real OCI registry (Debian's docker-registry): two sites publish signed
archives, a third lists them, filters, pulls by digest, verifies and imports them into a fresh
store; what is unsigned, revoked, untrusted, tampered or malformed is refused in one line with
exit code 2, and nothing of it is imported."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import sqlite3
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from containers.files import sha256_bytes
from containers.local_registry import LocalRegistry
from launch.provenance import archive as archives
from launch.sharing import annotations as notes
from launch.sharing import artifact, publish, registry
from launch.sharing.pulled import pulled_in
from launch.sharing.registry import Registry
from launch.sharing.trusted_keys import fingerprint_of
from tests.conftest import fabric_bench
from tests.sharing.conftest import site_key, write_run

STACK = "sha256:" + "5" * 64
RUN_A = "20260101T000000-torch-ddp-resnet18-n2-aaa"
RUN_B = "20260102T000000-torch-ddp-resnet50-n2-bbb"


@dataclass
class World:
    root: Path
    registry: LocalRegistry
    keys: dict[str, tuple[Path, str]]  # site -> (private key, allowed-signers line)
    allowed: Path
    revoked: Path
    members: dict[str, bytes]  # site-a's archive members, collected once

    @property
    def address(self) -> str:
        return self.registry.address

    def fingerprint(self, site: str) -> str:
        return fingerprint_of(base64.b64decode(self.keys[site][1].split()[2]))


@pytest.fixture(scope="module")
def world(registry: LocalRegistry, tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("sharing")
    keys = {site: site_key(root, site) for site in ("site-a", "site-b", "site-r", "site-c")}
    allowed = root / "allowed_signers"  # site-c's key is not trusted; site-r's is, but revoked
    allowed.write_text("".join(keys[site][1] + "\n" for site in ("site-a", "site-b", "site-r")))
    revoked = root / "revoked.keys"
    revoked.write_text("# site-r lost its key\n" + (root / "site-r.key.pub").read_text())
    sweep = write_run(root / "sweep-a", RUN_A, host="host-a", fabric="ethernet", model="resnet18", img=100, stack=STACK)
    members = archives.collect(sweep, system_name="site-a")
    return World(root, registry, keys, allowed, revoked, members)


def site_archive(world: World, out: Path, site: str = "site-a", key: str | None = "site-a") -> Path:
    """site-a's archive as `site`'s (its system description renamed), signed with `key`'s key."""
    members = dict(world.members)
    system = json.loads(members.pop("systems/site-a.json"))
    members[f"systems/{site}.json"] = json.dumps({**system, "system_name": site}).encode()
    archives.write(members, out, world.keys[key][0] if key else None)
    return out


def push_artifact(
    repository: Registry,
    archive: Path,
    annotations: dict[str, str],
    archive_size: int | None = None,
    system: bytes | None = None,
    signed_from: Path | None = None,
) -> str:
    """Push an artifact as a hostile publisher would: blobs and a manifest of its choosing; the
    signed-manifest layer is `signed_from`'s (else the archive's own), none for an unsigned one."""
    digest = registry.file_digest(archive)
    repository.push_blob(artifact.EMPTY_DATA, artifact.EMPTY.digest)
    repository.push_blob(archive, digest)
    size = archive.stat().st_size if archive_size is None else archive_size
    layers = [artifact.Blob(artifact.ARCHIVE_TYPE, digest, size)]
    if system is not None:
        repository.push_blob(system, "sha256:" + sha256_bytes(system))
        layers.append(artifact.Blob(artifact.SYSTEM_TYPE, "sha256:" + sha256_bytes(system), len(system)))
    signer = archives.read(signed_from or archive)
    signed = None
    if signer.signature is not None:
        data = artifact.signed_manifest(signer.manifest_bytes, signer.signature)
        repository.push_blob(data, "sha256:" + sha256_bytes(data))
        signed = artifact.Blob(artifact.SIGNED_TYPE, "sha256:" + sha256_bytes(data), len(data))
    manifest = artifact.manifest(layers[0], layers[1] if system else None, annotations, signed)
    return repository.put_manifest("hostile", manifest)


def described(world: World, archive: Path, signer: str = "site-a") -> dict[str, str]:
    return notes.of_archive(archives.read(archive), world.fingerprint(signer))


def store_env(folder: Path) -> dict[str, str]:
    return {**os.environ, "FABRIC_BENCH_STORE": str(folder / "results.sqlite")}


def store_rows(folder: Path) -> list[tuple[str, str, str]]:
    path = folder / "results.sqlite"
    if not path.is_file():
        return []
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT run_id, origin, path FROM results").fetchall())


def pinned(out: str, repo: str) -> str:
    reference = out.strip().splitlines()[-1]
    assert re.fullmatch(rf"{re.escape(repo)}@sha256:[0-9a-f]{{64}}", reference), out
    return reference


@pytest.mark.slow  # two archives collected (probe, stack, recipes) and nine commands: about 20 s
def test_two_sites_publish_and_a_third_lists_filters_pulls_by_digest_and_imports(world: World, tmp_path: Path) -> None:
    repo = f"{world.address}/community/results"
    published_a = fabric_bench("publish", str(site_archive(world, tmp_path / "a.tar.gz")), repo)
    assert published_a.returncode == 0, published_a.stderr
    reference_a = pinned(published_a.stdout, repo)
    sweep_b = write_run(
        tmp_path / "sweep-b", RUN_B, host="host-b", fabric="infiniband", model="resnet50", img=300, stack=STACK
    )
    key_b = str(world.keys["site-b"][0])
    published_b = fabric_bench("publish", str(sweep_b), repo, "--sign-key", key_b, "--system-name", "site-b")
    assert published_b.returncode == 0, published_b.stderr
    reference_b = pinned(published_b.stdout, repo)

    listed = fabric_bench("results", "pull", repo, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    by_site = {item[notes.SITE]: item for item in json.loads(listed.stdout)}
    assert {site: item["reference"] for site, item in by_site.items()} == {"site-a": reference_a, "site-b": reference_b}
    site_b = by_site["site-b"]
    assert (site_b[notes.FABRIC], site_b[notes.KIND], site_b[notes.MODEL]) == ("infiniband", "train", "resnet50")
    assert (site_b[notes.NODES_RANKS], site_b[notes.STACK_DIGEST], site_b[notes.RUNS]) == ("1x2", STACK, "1")
    assert (site_b[notes.ORIGIN], site_b[notes.SIGNER_KEY]) == ("host-b@c0ffee", world.fingerprint("site-b"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", site_b[notes.CREATED])
    only_ib = fabric_bench("results", "pull", repo, "--list", "--json", "--fabric", "infiniband")
    assert [item["reference"] for item in json.loads(only_ib.stdout)] == [reference_b]
    table = fabric_bench("results", "pull", repo, "--list", "--kind", "train", env={**os.environ, "COLUMNS": "200"})
    rows = [line for line in table.stdout.splitlines() if "site-" in line]
    assert table.returncode == 0 and len(rows) == 2, table.stdout
    assert "ethernet" in rows[0] and "resnet18" in rows[0] and "infiniband" in rows[1] and "resnet50" in rows[1]

    store = tmp_path / "store-c"
    trust = ["--allowed-signers", str(world.allowed), "--revoked", str(world.revoked)]
    by_filter = fabric_bench("results", "pull", repo, *trust, "--site", "site-a", env=store_env(store))
    assert by_filter.returncode == 0, by_filter.stderr
    by_digest = fabric_bench("results", "pull", reference_b, *trust, env=store_env(store))
    assert by_digest.returncode == 0, by_digest.stderr
    assert "1 results of site site-b (signed by site-b), origin host-b@c0ffee" in by_digest.stdout

    records = pulled_in(store)
    assert [(r.site, r.signer, r.reference) for r in records] == [
        ("site-a", "site-a", reference_a),
        ("site-b", "site-b", reference_b),
    ]
    for record in records:
        assert "sha256:" + sha256_bytes(record.archive_path.read_bytes()) == record.archive_digest
        assert record.archive_path.parent.name == record.archive_digest.removeprefix("sha256:")
        assert record.system_path is not None
        assert json.loads(record.system_path.read_text())["system_name"] == record.site
        assert archives.read(record.archive_path).signature is not None
        assert record.stack_digests == (STACK,)
    assert [json.loads(p.read_text())["run_id"] for r in records for p in r.result_paths] == [RUN_A, RUN_B]
    rows = store_rows(store)
    assert [(run_id, origin) for run_id, origin, _ in rows] == [(RUN_A, "host-a@c0ffee"), (RUN_B, "host-b@c0ffee")]
    assert sorted(Path(path) for _, _, path in rows) == sorted(p for r in records for p in r.result_paths)

    again = fabric_bench("results", "pull", repo, *trust, env=store_env(store))  # all: both are held already
    assert again.returncode == 0, again.stderr
    assert len(pulled_in(store)) == 2 and len(store_rows(store)) == 2
    assert [p.name for p in (store / "pulled").iterdir() if p.name.startswith(".")] == []


# ------------------------------------------------------------------ refusals


def unsigned(world: World, repository: Registry, tmp_path: Path) -> None:
    archive = site_archive(world, tmp_path / "unsigned.tar.gz", key=None)
    push_artifact(repository, archive, {**described(world, site_archive(world, tmp_path / "x.tar.gz"))})


def revoked(world: World, repository: Registry, tmp_path: Path) -> None:
    publish.publish(site_archive(world, tmp_path / "r.tar.gz", "site-r", "site-r"), repository.name)


def untrusted(world: World, repository: Registry, tmp_path: Path) -> None:
    publish.publish(site_archive(world, tmp_path / "c.tar.gz", "site-c", "site-c"), repository.name)


def tampered_blob(world: World, repository: Registry, tmp_path: Path) -> None:
    done = publish.publish(site_archive(world, tmp_path / "t.tar.gz"), repository.name)
    hexdigest = done.archive_digest.removeprefix("sha256:")
    blobs = world.registry.directory / "data/docker/registry/v2/blobs/sha256"
    stored = blobs / hexdigest[:2] / hexdigest / "data"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit pattern flipped in the registry's storage
    stored.write_bytes(bytes(data))


def signature_broken(world: World, repository: Registry, tmp_path: Path) -> None:
    """The archive's manifest changed after signing (a member added and listed), the old signature kept."""
    signed = archives.read(site_archive(world, tmp_path / "s.tar.gz"))
    members = {**signed.members, "results/extra.txt": b"added later\n"}
    later = tmp_path / "later.tar.gz"
    archives.write(members, later)
    out = tmp_path / "broken.tar.gz"
    with tarfile.open(later, "r:gz") as tar, tarfile.open(out, "w:gz") as target:
        for info in tar.getmembers():
            target.addfile(info, tar.extractfile(info))
            if info.name == archives.MANIFEST:
                sig = tarfile.TarInfo(archives.SIGNATURE)
                sig.size = len(signed.signature or b"")
                target.addfile(sig, io.BytesIO(signed.signature or b""))
    push_artifact(repository, out, described(world, tmp_path / "s.tar.gz"))


def size_lies(world: World, repository: Registry, tmp_path: Path) -> None:
    archive = site_archive(world, tmp_path / "l.tar.gz")
    push_artifact(repository, archive, described(world, archive), archive_size=archive.stat().st_size - 100)


def control_characters(world: World, repository: Registry, tmp_path: Path) -> None:
    archive = site_archive(world, tmp_path / "e.tar.gz")
    push_artifact(repository, archive, {**described(world, archive), notes.FABRIC: "ether\x1b[2J\x1b]0;x\x07net"})


def hostile_size(world: World, repository: Registry, tmp_path: Path) -> None:
    """A manifest from the registry's own answer, a size of 2**62 declared: refused before any fetch."""
    archive = site_archive(world, tmp_path / "h.tar.gz")
    push_artifact(repository, archive, described(world, archive), archive_size=2**62)


def path_as_site(world: World, repository: Registry, tmp_path: Path) -> None:
    archive = site_archive(world, tmp_path / "p.tar.gz")
    push_artifact(repository, archive, {**described(world, archive), notes.SITE: "../../etc/cron.d"})


def annotation_lies(world: World, repository: Registry, tmp_path: Path) -> None:
    archive = site_archive(world, tmp_path / "f.tar.gz")
    push_artifact(repository, archive, {**described(world, archive), notes.FABRIC: "infiniband"})


def another_sites_key(world: World, repository: Registry, tmp_path: Path) -> None:
    """site-a's (trusted) key signs results that say they are site-b's."""
    publish.publish(site_archive(world, tmp_path / "o.tar.gz", "site-b", "site-a"), repository.name)


REFUSALS: dict[Callable[[World, Registry, Path], None], str] = {
    unsigned: r"carries no signed manifest \(unsigned, .*\): refused; ask its site to publish it again$",
    revoked: r"is signed by revoked key SHA256:\S+ \(listed in .*revoked.keys\): refused$",
    untrusted: r"is signed by key SHA256:\S+, which .*allowed_signers does not list: refused$",
    tampered_blob: r"blob sha256:[0-9a-f]{64} arrived with digest sha256:[0-9a-f]{64} \(tampered in the registry\)",
    signature_broken: r"its signature by key SHA256:\S+ does not verify .*: refused$",
    size_lies: r"the answer announces \d+ bytes, over the \d+ limit: refused$",
    control_characters: r"annotation org.fabric-bench.fabric 'ether.*' holds something other than tokens: refused$",
    hostile_size: r"layer 1: size 4611686018427387904 is not a number of bytes 0\.\.\d+: refused$",
    path_as_site: r"annotation org.fabric-bench.site '../../etc/cron.d' is not a site name: refused$",
    annotation_lies: r"annotation org.fabric-bench.fabric says 'infiniband', the signed archive 'ethernet': refused$",
    another_sites_key: r"site site-b is signed by site-a, whose allowed-signers line names another site: refused$",
}


@pytest.mark.parametrize("make", list(REFUSALS), ids=[make.__name__ for make in REFUSALS])
def test_a_refused_artifact_is_one_line_exit_2_and_nothing_is_imported(
    world: World, tmp_path: Path, make: Callable[[World, Registry, Path], None]
) -> None:
    repository = Registry(world.address, f"case/{make.__name__.replace('_', '-')}")
    make(world, repository, tmp_path)
    store = tmp_path / "store"
    trust = ["--allowed-signers", str(world.allowed), "--revoked", str(world.revoked)]
    pulled = fabric_bench("results", "pull", repository.name, *trust, env=store_env(store))
    lines = pulled.stderr.strip().splitlines()
    assert pulled.returncode == 2 and len(lines) == 1, pulled.stderr
    assert re.match("fabric-bench: (error|skipped): ", lines[0]) and re.search(REFUSALS[make], lines[0]), lines[0]
    assert "\x1b" not in pulled.stderr and "\x07" not in pulled.stderr
    assert pulled_in(store) == [] and store_rows(store) == []
    assert not (store / "pulled").exists() or list((store / "pulled").iterdir()) == []


def test_a_listing_names_what_it_refuses_and_exits_2(world: World, tmp_path: Path) -> None:
    repository = Registry(world.address, "case/listing")
    path_as_site(world, repository, tmp_path)
    listed = fabric_bench("results", "pull", repository.name, "--list", "--json")
    assert listed.returncode == 2 and json.loads(listed.stdout) == []
    assert re.search(r"refused: .*case/listing:hostile: .*is not a site name: refused$", listed.stderr.strip())


def test_publish_refuses_an_unsigned_archive_and_pushes_nothing(world: World, tmp_path: Path) -> None:
    repository = Registry(world.address, "case/publish-unsigned")
    archive = site_archive(world, tmp_path / "u.tar.gz", key=None)
    out = fabric_bench("publish", str(archive), repository.name)
    assert out.returncode == 2 and "is unsigned: refused" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert repository.tags() == []


def test_a_gzip_bomb_stays_refused_through_the_registry(world: World, tmp_path: Path) -> None:
    """An archive that unpacks past what its signed manifest lists is refused by the header scan,
    however trusted its signer."""
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb") as out:
        info = tarfile.TarInfo("results/x")
        info.size = 600 * 2**20
        out.write(info.tobuf())
    repository = Registry(world.address, "case/bomb")
    archive = site_archive(world, tmp_path / "b.tar.gz")
    push_artifact(repository, bomb, described(world, archive), signed_from=archive)
    pulled = fabric_bench(
        "results", "pull", repository.name, "--allowed-signers", str(world.allowed), env=store_env(tmp_path / "s")
    )
    assert pulled.returncode == 2, pulled.stderr
    assert re.search(r"a member unpacks to 629145600 bytes, over the \d+ MiB limit; refused$", pulled.stderr.strip())
    assert pulled_in(tmp_path / "s") == [] and store_rows(tmp_path / "s") == []


def test_c8_an_annotation_cannot_replace_the_pinned_reference_in_the_listing(world: World, tmp_path: Path) -> None:
    repository = Registry(world.address, "case/c8")
    archive = site_archive(world, tmp_path / "c8.tar.gz")
    lying = {**described(world, archive), "reference": "evil.example/x@sha256:" + "e" * 64, "tag": "latest"}
    digest = push_artifact(repository, archive, lying)
    listed = fabric_bench("results", "pull", repository.name, "--list", "--json")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)
    assert (item["reference"], item["tag"], item["manifest_digest"]) == (repository.pinned(digest), "hostile", digest)
    assert "evil.example" not in listed.stdout and item[notes.SITE] == "site-a"


def test_c9_a_junk_manifest_under_another_tag_does_not_stop_a_good_artifact(world: World, tmp_path: Path) -> None:
    repository = Registry(world.address, "case/c9")
    good = publish.publish(site_archive(world, tmp_path / "c9.tar.gz"), repository.name)
    empty = artifact.EMPTY.descriptor()  # an image manifest of someone else's (its blob is there)
    junk = json.dumps(
        {"schemaVersion": 2, "mediaType": artifact.MANIFEST_MEDIA_TYPE, "config": empty, "layers": [empty]}
    )
    repository.put_manifest("junk", junk.encode())
    store = tmp_path / "store"
    trust = ["--allowed-signers", str(world.allowed), "--revoked", str(world.revoked)]
    pulled = fabric_bench("results", "pull", repository.name, *trust, "--site", "site-a", env=store_env(store))
    lines = pulled.stderr.strip().splitlines()
    assert pulled.returncode == 2 and len(lines) == 1, pulled.stderr  # said, and the status says so ...
    assert re.fullmatch(
        r"fabric-bench: skipped: \S+:junk: .*is not application/vnd.fabric-bench.results.v1\+tar: refused", lines[0]
    )
    assert [record.reference for record in pulled_in(store)] == [good.reference]  # ... but site A's is pulled
    assert [run_id for run_id, _, _ in store_rows(store)] == [RUN_A]


def test_a_rollback_is_refused_and_a_dated_revocation_keeps_only_what_was_pinned_before_it(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = Registry(world.address, "case/freshness")
    monkeypatch.setattr(archives.time, "time", lambda: 1_700_000_000.0)  # written in November 2023 ...
    old = publish.publish(site_archive(world, tmp_path / "old.tar.gz", "site-r", "site-r"), repository.name)
    monkeypatch.undo()  # ... and the same run again today
    new = publish.publish(site_archive(world, tmp_path / "new.tar.gz", "site-r", "site-r"), repository.name)
    store, allowed = tmp_path / "store", ["--allowed-signers", str(world.allowed)]
    assert fabric_bench("results", "pull", new.reference, *allowed, env=store_env(store)).returncode == 0
    rollback = fabric_bench("results", "pull", old.reference, *allowed, env=store_env(store))
    assert rollback.returncode == 2 and rollback.stderr.strip().endswith(
        f"already pulled ({new.reference}): a rollback, refused"
    )

    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
    key_line = (world.root / "site-r.key.pub").read_text().strip()
    (dated := tmp_path / "dated.keys").write_text(f"revoked-since={tomorrow} {key_line}\n")
    (undated := tmp_path / "undated.keys").write_text(key_line + "\n")
    again = fabric_bench("results", "pull", new.reference, *allowed, "--revoked", str(dated), env=store_env(store))
    assert again.returncode == 0, again.stderr  # pinned here before the revocation's day: still accepted
    for revoked, reference in ((undated, new.reference), (dated, old.reference)):  # pinned, but undated; not pinned
        refused = fabric_bench("results", "pull", reference, *allowed, "--revoked", str(revoked), env=store_env(store))
        assert refused.returncode == 2 and "is signed by revoked key" in refused.stderr, refused.stderr
