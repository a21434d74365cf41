"""Archives: one tar.gz carrying a run or sweep with everything needed to trust,
repeat and compare it, and a manifest (schema version, sha256 of every member).

    manifest.json              schema_version, bundle commit, {member: {sha256, bytes}}
    results/...                the run or sweep directory (regular files)
    runs.json                  per run: path in the archive, argv, env, spec, image
    stack/images.json          each image: path, recorded and current sha256, inspect output
    stack/recipe/...           rendered .def/Dockerfile per (fabric, flavour), recipe inputs
    stack/software.json        pip freeze, MPI/UCX/libfabric/NCCL versions (in the image, or host)
    stack/sbom.cdx.json        the image's CycloneDX SBOM; stack/stack-sbom.cdx.json its stack's
    host/probe.json            launch.site.probe facts and verdicts
    config/...                 site and experiment files
    systems/<name>.json        MLPerf-style system description
    bundle.json                git commit and state of this bundle

Reading never trusts the file: every member is checked (a regular file or a
directory, a relative path that stays inside, listed in the manifest with the
right sha256, within launch.trust.ArchiveLimits) before anything is written;
`extract` writes the files itself. An archive may carry `manifest.sig`, an OpenSSH
signature of the manifest (launch.provenance.signing): readers show who signed and refuse a
signature that does not verify.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import subprocess
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from containers.files import REPO, git, sha256_bytes
from containers.untrusted import UntrustedInput, load_json
from launch.provenance import signing, tar_headers
from launch.errors import UsageError
from launch.trust import ArchiveLimits
from launch.results.result import Result, ResultError, parse
from launch import shapes
from launch.ranks.runtimes import runtime_name, runtime_named

if TYPE_CHECKING:  # containers.recipe needs hpccm: imported where the recipes are rendered
    from containers.recipe import Recipe

ARCHIVE_SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # signs the manifest's bytes as stored; not listed in it
RECIPE_INPUTS = (
    "containers/stack.py",
    "containers/fabrics",
    "containers/recipe.py",
    "containers/placeholders.py",
    "containers/stack_blocks.py",
    "containers/stack_recipes.py",
    "containers/fabric_layer.py",
    "containers/self_test.py",
    "containers/build.py",
    "containers/build_inputs.py",
    "containers/build_backends.py",
    "containers/image_store.py",
    "containers/host.py",
    "containers/image-test.sh",
    "requirements.txt",
    "requirements-nodeps.txt",
    "containers/horovod",
)


def _json(data) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode()


def bundle_state() -> dict:
    return {
        "commit": git("rev-parse", "HEAD") or "unknown",
        "describe": git("describe", "--always", "--dirty"),
        "dirty": bool(git("status", "--porcelain")),
        "created_unix": time.time(),
        "host": socket.gethostname(),
    }


def _tree(directory: Path, prefix: str) -> dict[str, bytes]:
    """Regular files under directory (links are not followed and not carried)."""
    members = {}
    for path in sorted(directory.rglob("*")):
        if (
            path.is_file()
            and not path.is_symlink()
            and not any(p.is_symlink() for p in path.parents if directory in p.parents)
        ):
            members[f"{prefix}/{path.relative_to(directory).as_posix()}"] = path.read_bytes()
    return members


def _results(members: dict[str, bytes]) -> dict[str, Result]:
    """The members that are results; one that is not is named on stderr and left out."""
    found = {}
    for name, data in members.items():
        if name.startswith("results/") and name.endswith("/result.json") or name == "results/result.json":
            try:
                found[name] = parse(data, name)
            except ResultError as exc:
                print(f"fabric-bench: warning: {exc}", file=sys.stderr)
    return found


def _images(results: list[dict]) -> tuple[dict, dict[str, bytes]]:
    """Each distinct image: digest recorded and now, inspect output where the runtime can."""
    images, members = {}, {}
    for r in results:
        image = (r.get("image") or {}).get("path")
        recorded_runtime = (r.get("launch") or {}).get("runtime") or (r.get("spec") or {}).get("runtime")
        if not image or image in images:
            continue
        runtime = runtime_named(runtime_name(f"result {r.get('run_id')}: runtime", recorded_runtime))
        image = shapes.image(f"result {r.get('run_id')}: image", image)  # what the runtime's argv takes
        entry = {
            "path": image,
            "runtime": recorded_runtime,
            "digest_recorded": r["image"].get("digest"),
            "stack_digest": r["image"].get("stack_digest"),
            "digest_now": runtime.digest(image),
            "inspect": None,
        }
        argv = runtime.inspect_argv(image)
        if argv and runtime.available():
            out = subprocess.run(argv, capture_output=True, text=True)
            entry["inspect"] = out.stdout if out.returncode == 0 else None
        images[image] = entry
        if entry["inspect"]:
            members[f"stack/inspect/{len(images)}.json"] = entry["inspect"].encode()
    return images, members


def _recipes(results: list[dict], images: dict) -> dict[str, bytes]:
    """Rendered recipes of the images' (fabric, flavour), or of the runs' fabrics, and of their
    flavours' stack images."""
    pairs = set()
    for entry in images.values():
        labels = _labels(entry.get("inspect"))
        if labels.get("org.fabric-bench.fabric"):
            pairs.add((labels["org.fabric-bench.fabric"], labels.get("org.fabric-bench.flavour", "cpu")))
    for r in results:
        spec = r.get("spec") or {}
        if spec.get("fabric") and not images:
            pairs.add((spec["fabric"], "cuda" if spec.get("gpus_per_node") else "cpu"))
    members: dict[str, bytes] = {}
    notes = {}
    render: Callable[[str, str], Recipe] | None = None
    try:
        from containers import recipe

        render = recipe.render
    except Exception as exc:  # hpccm or the module absent: say so, carry the inputs anyway
        notes["render"] = f"unavailable: {exc}"
    # each flavour's stack image too: every fabric image of the flavour is built FROM it
    stacks = {("stack", flavour) for _, flavour in pairs}
    for fabric, flavour in sorted(stacks) + sorted(pairs):
        if render is None:
            break
        try:
            rendered = render(fabric, flavour)
        except Exception as exc:
            notes[f"{fabric}-{flavour}"] = f"render failed: {exc}"
            continue
        members[f"stack/recipe/{fabric}-{flavour}.def"] = rendered.definition.encode()
        members[f"stack/recipe/{fabric}-{flavour}.Dockerfile"] = rendered.dockerfile.encode()
        notes[f"{fabric}-{flavour}"] = f"recipe hash {rendered.recipe_hash}"
    for relative in RECIPE_INPUTS:
        path = REPO / relative
        if path.is_dir():
            members.update(_tree(path, f"stack/recipe-inputs/{relative}"))
        elif path.is_file():
            members[f"stack/recipe-inputs/{relative}"] = path.read_bytes()
    members["stack/recipe/recipes.json"] = _json({"pairs": sorted(pairs), "notes": notes})
    return members


def _labels(inspect_text: str | None) -> dict:
    try:
        data = json.loads(inspect_text or "")
        return data["data"]["attributes"]["labels"] or {}
    except (ValueError, KeyError, TypeError):
        return {}


def collect(
    directory: Path,
    *,
    site: Path | None = None,
    experiment: Path | None = None,
    system_name: str | None = None,
    submitter: str = "",
) -> dict[str, bytes]:
    """Every member of the archive of `directory` (a run or a sweep), manifest excluded."""
    from launch.site import software, system_description
    from launch.site.probe import collect as probe_host, probe_report

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a run or sweep directory")
    members = _tree(directory, "results")
    results = _results(members)
    if not results:
        raise UsageError(f"{directory}: no result.json inside; nothing to archive")
    carried = {name: dict(r) for name, r in results.items()}  # the raw mappings: carried as data, as read
    runs = [
        {
            "member": name,
            "run_id": r["run_id"],
            "argv": r.get("argv"),
            "env": r.get("env"),
            "spec": r.get("spec"),
            "image": r.get("image"),
            "status": r.get("status"),
        }
        for name, r in sorted(carried.items())
    ]
    members["runs.json"] = _json(runs)
    images, inspect_members = _images(list(results.values()))
    members.update(inspect_members)
    members["stack/images.json"] = _json(images)
    members.update(_recipes(list(results.values()), images))
    first = next(iter(images.values()), None)
    stack = (
        software.capture(runtime_named(runtime_name("runtime", first["runtime"])), shapes.image("image", first["path"]))
        if first and runtime_named(runtime_name("runtime", first["runtime"])).available()
        else software.capture()
    )
    members["stack/software.json"] = _json(stack)
    if first:  # the bills of materials of the image and its stack (containers/sbom.py)
        from containers.build import registry
        from containers.sbom import for_archive

        members.update(for_archive(first["path"], first["runtime"], registry()))
    facts = probe_host()
    members["host/probe.json"] = _json(probe_report(facts))
    for name, path in (("site", site), ("experiment", experiment)):
        if path is not None:
            try:
                members[f"config/{name}-{Path(path).name}"] = Path(path).read_bytes()
            except OSError as exc:
                raise UsageError(f"cannot read {name} file {path}: {exc.strerror}") from None
    name = system_name or socket.gethostname()
    from launch.site.config import load_site  # what the site file adds to the description (its score counts it)

    site_config = load_site(site) if site is not None else None
    members[f"systems/{name}.json"] = _json(
        system_description.describe(
            facts, list(results.values()), stack, system_name=name, submitter=submitter, site=site_config
        )
    )
    members["bundle.json"] = _json(bundle_state())
    return members


def write(members: dict[str, bytes], output: Path, sign_key: Path | None = None) -> dict:
    """Write the tar.gz (manifest first, then its signature with `sign_key`); returns the manifest.
    It is written under a unique temporary name beside `output`, removed on any failure."""
    manifest = {
        "schema_version": ARCHIVE_SCHEMA_VERSION,
        "created_unix": time.time(),
        "bundle_commit": json.loads(members.get("bundle.json", b"{}")).get("commit"),
        "members": {name: {"sha256": sha256_bytes(data), "bytes": len(data)} for name, data in sorted(members.items())},
    }
    manifest_bytes = _json(manifest)
    head = [(MANIFEST, manifest_bytes)]
    if sign_key is not None:
        head.append((SIGNATURE, signing.sign(manifest_bytes, sign_key)))
    output = Path(output)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name, data in [*head, *sorted(members.items())]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(manifest["created_unix"])
                tar.addfile(info, io.BytesIO(data))
        tmp.replace(output)
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return manifest


# ------------------------------------------------------------------ reading


@dataclass
class Archive:
    path: Path
    manifest: dict
    members: dict[str, bytes]  # every regular file but the manifest and its signature, verified
    manifest_bytes: bytes = b""
    signature: bytes | None = None

    def results(self) -> dict[str, Result]:
        return _results(self.members)

    def provenance(self, allowed_signers: Path | None = None, require_signed: bool = False) -> signing.Provenance:
        """Who signed this archive (launch.provenance.signing.check: a broken signature is always refused)."""
        return signing.check(
            self.manifest_bytes, self.signature, allowed_signers, require_signed, where=f"archive {self.path}"
        )


def safe_name(name: str) -> str:
    """The member's relative path, or an error if it could land outside the target."""
    if not name or name.startswith(("/", "\\")) or "\\" in name or "\x00" in name:
        raise UsageError(f"archive member {name!r} has an absolute or unsafe path")
    parts = PurePosixPath(name).parts
    if any(part in ("..", "") for part in parts) or PurePosixPath(name).is_absolute():
        raise UsageError(f"archive member {name!r} escapes the target directory")
    return str(PurePosixPath(*[p for p in parts if p != "."]))


def listed_limits(
    manifest_bytes: bytes, where: str, ceiling: ArchiveLimits = ArchiveLimits()
) -> tuple[list[str], ArchiveLimits]:
    """(member names, limits) of an archive's manifest.json read on its own (as a puller reads
    the signed one before it fetches the archive): reading the archive may then hold no more
    members and bytes than the manifest lists (and its signature), within `ceiling`."""
    try:
        manifest = load_json(manifest_bytes, f"{where}: {MANIFEST}", ceiling.member_bytes)
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    listed = manifest.get("members") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != ARCHIVE_SCHEMA_VERSION:
        raise UsageError(f"{where}: {MANIFEST} is not an archive manifest of schema_version {ARCHIVE_SCHEMA_VERSION}")
    if not isinstance(listed, dict) or not 0 < len(listed) <= ceiling.members:
        raise UsageError(f"{where}: {MANIFEST} lists no members, or more than {ceiling.members}: refused")
    said = [entry.get("bytes") if isinstance(entry, dict) else None for entry in listed.values()]
    sizes = [size for size in said if isinstance(size, int) and not isinstance(size, bool) and size >= 0]
    if len(sizes) != len(said):
        raise UsageError(f"{where}: {MANIFEST} gives a member without a size in bytes: refused")
    extra = len(manifest_bytes) + signing.MAX_SIGNATURE_BYTES  # the manifest and its signature, not listed
    limits = ArchiveLimits(
        members=len(listed) + 2,
        member_bytes=min(ceiling.member_bytes, max(max(sizes), extra)),
        total_bytes=min(ceiling.total_bytes, sum(sizes) + extra),
    )
    return [str(name) for name in listed], limits


def read(path: Path, limits: ArchiveLimits = ArchiveLimits()) -> Archive:
    """Open and verify an archive completely, streaming and within `limits` (its headers walked
    and bounded first, launch.provenance.tar_headers); any flaw is a UsageError (one line)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"archive {path} not found")
    tar_headers.scan(path, limits)  # headers bounded before tarfile reads one (CVE-2024-6232, pax bombs)
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(path, "r|gz") as tar:  # a stream: members one at a time, never the whole index
            for count, member in enumerate(tar, 1):
                if count > limits.members:
                    raise UsageError(f"archive {path} has more than {limits.members} members; refused")
                name = safe_name(member.name)
                if member.isdir():
                    continue
                if not member.isreg():
                    kind = "link" if member.issym() or member.islnk() else "special file"
                    raise UsageError(f"archive member {member.name!r} is a {kind}; refused")
                if name in files:
                    raise UsageError(f"archive member {name!r} appears twice")
                if member.size > limits.member_bytes:
                    raise UsageError(
                        f"archive member {name!r} unpacks to {member.size} bytes, over the "
                        f"{limits.member_bytes // 2**20} MiB limit; refused"
                    )
                total += member.size
                if total > limits.total_bytes:
                    raise UsageError(f"archive {path} unpacks to more than {limits.total_bytes // 2**20} MiB; refused")
                extracted = tar.extractfile(member)
                if extracted is None:  # regular files only reach here; a tar that says otherwise is broken
                    raise UsageError(f"archive member {name!r} has no data; refused")
                files[name] = extracted.read()  # member.size bytes, checked above
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise UsageError(f"archive {path} is corrupt or truncated: {exc}") from None
    if MANIFEST not in files:
        raise UsageError(f"archive {path} has no {MANIFEST}")
    folders = {str(parent) for name in files for parent in PurePosixPath(name).parents}
    clash = sorted(folders & set(files))
    if clash:
        raise UsageError(f"archive member {clash[0]!r} is a file and a folder; refused")
    manifest_bytes, signature = files.pop(MANIFEST), files.pop(SIGNATURE, None)
    try:
        manifest = load_json(manifest_bytes, f"archive {path}: {MANIFEST}", limits.member_bytes)
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != ARCHIVE_SCHEMA_VERSION:
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise UsageError(f"archive {path}: unknown archive schema_version {version!r}")
    listed = manifest.get("members") or {}
    if not isinstance(listed, dict):
        raise UsageError(f"archive {path}: {MANIFEST} members is not an object")
    for name in sorted(set(files) | set(listed)):
        if name not in files:
            raise UsageError(f"archive {path}: {name!r} is in the manifest but missing")
        if name not in listed:
            raise UsageError(f"archive {path}: {name!r} is not in the manifest")
        if not isinstance(listed[name], dict):
            raise UsageError(f"archive {path}: manifest entry {name!r} is not an object")
        if sha256_bytes(files[name]) != listed[name].get("sha256"):
            raise UsageError(f"archive {path}: checksum mismatch for {name}")
    return Archive(path, manifest, files, manifest_bytes, signature)


def extract(archive: Archive, target: Path) -> list[Path]:
    """Write a verified archive's files under target (which must be empty or absent)."""
    target = Path(target)
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"{target} is not empty; extract into a new directory")
    root = target.resolve()
    written = []
    signature = {SIGNATURE: archive.signature} if archive.signature is not None else {}
    for name, data in sorted(
        {MANIFEST: archive.manifest_bytes or _json(archive.manifest), **signature, **archive.members}.items()
    ):
        destination = (root / safe_name(name)).resolve()
        if root not in destination.parents:
            raise UsageError(f"archive member {name!r} escapes the target directory")
        destination.parent.mkdir(parents=True, exist_ok=True)
        with open(destination, "xb") as out:
            out.write(data)
        written.append(destination)
    return written
