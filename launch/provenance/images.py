"""What a site expects of an image it pulls, and the check after the pull.

Two sources of expectation, both untrusted data validated on load:

- a **reference file** written by `image push --reference-file R.json` at the site that built
  the images: per image its pinned reference (HOST/NAME@sha256:MANIFEST), runtime, image digest,
  labels and SBOM; signed (R.json.sig, `ssh-keygen -Y`, namespace `fabric-bench-image`) with
  the site's key;
- an **archive** (`fabric-bench archive`): the digests its runs recorded (image and stack)
  and the labels `inspect` showed at the archiving site.

`check(pulled_digest, labels, expectation)` lists every disagreement (digest, stack digest,
recipe hash, fabric, flavour); an empty list is the pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from containers.host import RUNTIMES
from containers.files import write_atomic
from containers.untrusted import UntrustedInput, load_json, read_file
from launch.provenance import signing
from launch.errors import UsageError

SCHEMA = "fabric-bench-image-references/1"
MAX_BYTES = 16 << 20
MAX_SIGNATURE_BYTES = 64 << 10  # an OpenSSH signature is under 1 KiB
CHECKED_LABELS = (
    "org.fabric-bench.recipe-hash",
    "org.fabric-bench.fabric",
    "org.fabric-bench.flavour",
    "org.fabric-bench.stack-digest",
)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def normal(digest: str | None) -> str:
    """sha256:HEX for a bare HEX or a prefixed one ('' stays '')."""
    digest = (digest or "").strip()
    return digest if not digest or digest.startswith("sha256:") else f"sha256:{digest}"


@dataclass(frozen=True)
class Expectation:
    where: str  # "reference file R.json", "archive A.tar.gz"
    image_digest: str  # sha256:...
    labels: dict = field(default_factory=dict)  # only the CHECKED_LABELS that were recorded
    sbom: str = ""  # the SBOM text the source carried, if any
    reference: str = ""


# ---------------------------------------------------------------- reference files


def reference_entry(reference: str, runtime: str, image_digest: str, labels: dict, sbom: str) -> dict:
    return {
        "reference": reference,
        "runtime": runtime,
        "image_digest": normal(image_digest),
        "labels": {k: v for k, v in labels.items() if k in CHECKED_LABELS},
        "sbom": sbom,
    }


def write_references(path: Path, entry: dict, sign_key: Path | None = None) -> None:
    """Add (or replace, by reference) an entry in the reference file; sign the whole file."""
    path = Path(path)
    entries = read_references(path, verify=False) if path.is_file() else []
    entries = [e for e in entries if e["reference"] != entry["reference"]] + [entry]
    data = (json.dumps({"schema": SCHEMA, "images": entries}, indent=1, sort_keys=True) + "\n").encode()
    signature = Path(str(path) + ".sig")
    signed = signing.sign(data, sign_key, namespace=signing.IMAGE_NAMESPACE) if sign_key else None
    try:  # each renamed into place: a link planted at either name is replaced, never followed
        write_atomic(path, data)
        if signed is not None:
            write_atomic(signature, signed)
        else:
            signature.unlink(missing_ok=True)  # a stale signature would no longer verify
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_references(
    path: Path, verify: bool = True, allowed_signers: Path | None = None, require_signed: bool = False
) -> list[dict]:
    """The entries of a reference file; its signature (R.json.sig), where there is one, must verify."""
    path = Path(path)
    try:
        data = read_file(path, MAX_BYTES, "image reference file")
        if verify:
            signature = Path(str(path) + ".sig")
            sig = read_file(signature, MAX_SIGNATURE_BYTES, "signature") if signature.is_file() else None
            signing.check(
                data,
                sig,
                allowed_signers,
                require_signed,
                where=f"image reference file {path}",
                namespace=signing.IMAGE_NAMESPACE,
            )
        body = load_json(data, f"image reference file {path}", MAX_BYTES)
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(body, dict) or body.get("schema") != SCHEMA or not isinstance(body.get("images"), list):
        raise UsageError(f"image reference file {path}: expected {{'schema': '{SCHEMA}', 'images': [...]}}")
    entries = []
    for i, entry in enumerate(body["images"]):
        if not _well_formed(entry):
            raise UsageError(f"image reference file {path}: entry {i} is malformed")
        entries.append(entry)
    return entries


def _well_formed(entry) -> bool:
    """An entry names an image pinned by digest, its runtime, digest, labels (text) and SBOM (text)."""
    from containers.oci import RegistryError, parse

    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("reference"), str)
        and DIGEST.fullmatch(str(entry.get("image_digest", "")))
        and isinstance(entry.get("labels"), dict)
        and all(isinstance(v, str) for v in entry["labels"].values())
        and isinstance(entry.get("sbom", ""), str)
        and entry.get("runtime") in RUNTIMES
    ):
        return False
    try:
        return bool(parse(entry["reference"]).digest)
    except RegistryError:
        return False


def from_references(
    path: Path, reference: str, allowed_signers: Path | None = None, require_signed: bool = False
) -> Expectation:
    from containers.oci import parse

    wanted = parse(reference)
    for entry in read_references(path, allowed_signers=allowed_signers, require_signed=require_signed):
        ref = parse(entry["reference"])
        if (ref.host, ref.name, ref.digest) == (wanted.host, wanted.name, wanted.digest):
            return Expectation(
                f"reference file {path}",
                entry["image_digest"],
                entry["labels"],
                entry.get("sbom", ""),
                entry["reference"],
            )
    raise UsageError(f"image reference file {path} does not list {reference}")


# ---------------------------------------------------------------- archives


def from_archive(archive, digest: str) -> Expectation:
    """What the archive recorded for the image whose digest is `digest` (its runs' image, or
    the stack image those were built FROM)."""
    try:
        images = load_json(
            archive.members.get("stack/images.json", b"{}"), f"archive {archive.path}: stack/images.json", MAX_BYTES
        )
    except UntrustedInput as exc:
        raise UsageError(str(exc)) from None
    wanted = normal(digest)
    recorded = []
    for entry in images.values() if isinstance(images, dict) else []:
        if not isinstance(entry, dict):
            continue
        labels = _archive_labels(entry.get("inspect"))
        image_digest, stack_digest = (
            normal(value) if isinstance(value, str) else ""
            for value in (entry.get("digest_recorded"), entry.get("stack_digest"))
        )
        recorded += [image_digest, stack_digest]
        if wanted == image_digest:
            return Expectation(
                f"archive {archive.path}",
                image_digest,
                {k: v for k, v in labels.items() if k in CHECKED_LABELS},
                archive.members.get("stack/sbom.cdx.json", b"").decode(errors="replace"),
            )
        if wanted == stack_digest:
            keep = {k: labels[k] for k in ("org.fabric-bench.flavour",) if k in labels}
            return Expectation(
                f"archive {archive.path} (the stack its image was built FROM)",
                stack_digest,
                keep,
                archive.members.get("stack/stack-sbom.cdx.json", b"").decode(errors="replace"),
            )
    shown = ", ".join(d[:19] for d in recorded if d) or "none"
    raise UsageError(f"archive {archive.path} records no image with digest {wanted[:19]}... (it records {shown})")


def _archive_labels(inspect_text) -> dict:
    if not isinstance(inspect_text, str):
        return {}
    try:
        data = load_json(inspect_text, "inspect output", MAX_BYTES)
    except UntrustedInput:
        return {}

    def field(value: object, *keys: str) -> object:
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    found = field(data, "data", "attributes", "labels")
    if found is None and isinstance(data, list) and data:
        found = field(data[0], "Labels") or field(data[0], "Config", "Labels")
    return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}


# ---------------------------------------------------------------- the check


def check(digest: str, labels: dict, expected: Expectation) -> list[str]:
    """Every way the pulled image disagrees with what was expected ([] = it is that image)."""
    problems = []
    if normal(digest) != normal(expected.image_digest):
        problems.append(f"digest {normal(digest)} is not the {normal(expected.image_digest)} {expected.where} names")
    for key, value in sorted(expected.labels.items()):
        have = labels.get(key)
        if key == "org.fabric-bench.stack-digest":
            have, value = normal(have or ""), normal(value)
        if have != value:
            problems.append(f"label {key} is {have!r}, {expected.where} says {value!r}")
    return problems
