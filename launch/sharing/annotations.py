"""What a results artifact says about itself: the manifest annotations a reader filters on.

Each is computed from the signed archive (`of_archive`), so after a pull they are computed
again and must agree: the manifest is not signed, the archive is. A value is one token or a
comma-separated, sorted set of tokens (an archive of a sweep holds several fabrics or models):

    org.opencontainers.image.created   when the archive was written (UTC, RFC 3339)
    org.fabric-bench.site              the site: the archive's system description's name
    org.fabric-bench.fabric            the runs' fabrics
    org.fabric-bench.kind              the benchmark kinds (train, allreduce, ...)
    org.fabric-bench.model             the models trained (kinds without a model: size)
    org.fabric-bench.size              the message sizes swept, MIN-MAX bytes
    org.fabric-bench.nodes-ranks       NODESxRANKS_PER_NODE of each run (2x8: 2 nodes, 8 ranks each)
    org.fabric-bench.stack-digest      the stack images' digests (sha256:...)
    org.fabric-bench.bundle-version    the bundle commit that wrote the archive
    org.fabric-bench.origin            the results' origins (host@commit), as the store keys them
    org.fabric-bench.runs              how many results the archive holds
    org.fabric-bench.signer-key        the signing key's fingerprint (SHA256:...)

Read from a registry, annotations are foreign input: at most MAX_ANNOTATIONS keys, each value
at most MAX_VALUE_CHARS, tokens of TOKEN's characters only (no control character, space, quote
or path separator; the signer key a fingerprint), a key of this bundle's prefix must be one of
the above, and a created date must be a date.
"""

from __future__ import annotations

import re
import time
from typing import Iterable, Mapping

from launch.errors import UsageError
from launch.provenance.archive import Archive
from launch.results.result import Result, ranks_per_node, typed
from launch.schema import at
from launch.results.store import origin_of
from launch.shapes import terminal

CREATED = "org.opencontainers.image.created"
PREFIX = "org.fabric-bench."
SITE = PREFIX + "site"
FABRIC = PREFIX + "fabric"
KIND = PREFIX + "kind"
MODEL = PREFIX + "model"
SIZE = PREFIX + "size"
NODES_RANKS = PREFIX + "nodes-ranks"
STACK_DIGEST = PREFIX + "stack-digest"
BUNDLE_VERSION = PREFIX + "bundle-version"
ORIGIN = PREFIX + "origin"
RUNS = PREFIX + "runs"
SIGNER_KEY = PREFIX + "signer-key"
OURS = (SITE, FABRIC, KIND, MODEL, SIZE, NODES_RANKS, STACK_DIGEST, BUNDLE_VERSION, ORIGIN, RUNS, SIGNER_KEY)
# what `results pull` filters on: its option name -> the annotation
FILTERS = {
    "site": SITE,
    "fabric": FABRIC,
    "kind": KIND,
    "model": MODEL,
    "size": SIZE,
    "nodes_ranks": NODES_RANKS,
    "stack_digest": STACK_DIGEST,
    "bundle_version": BUNDLE_VERSION,
}

MAX_ANNOTATIONS = 64
MAX_VALUE_CHARS = 4096
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+@=-]{0,199}")
FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
KEY = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
CREATED_FORM = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
SITE_FORM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def tokens(value: str) -> tuple[str, ...]:
    return tuple(value.split(",")) if value else ()


def _joined(key: str, values: set[str]) -> str:
    for value in values:
        if not TOKEN.fullmatch(value):
            raise UsageError(f"{key} value {value!r} is not a token ([A-Za-z0-9_.:+@=-], at most 200)")
    return ",".join(sorted(values))


def created(unix_s: object) -> str:
    """An archive's created_unix as UTC; anything that is not a time of this era reads as the epoch."""
    seconds = unix_s if isinstance(unix_s, (int, float)) and not isinstance(unix_s, bool) else 0
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds if 0 <= seconds < 2**33 else 0))
    except (OverflowError, ValueError, OSError):  # NaN
        return "1970-01-01T00:00:00Z"


def of_results(results: list[Result]) -> dict[str, str]:
    """The annotations the results themselves give (their fields, read typed)."""
    found: dict[str, set[str]] = {key: set() for key in (FABRIC, KIND, MODEL, SIZE, NODES_RANKS, STACK_DIGEST, ORIGIN)}
    for result in results:
        fields = typed(result)
        if fields is None:
            continue
        spec = fields.spec
        found[FABRIC].add(str(spec.fabric if spec and spec.fabric else "none"))
        found[KIND].add(str(fields.benchmark or "unknown"))
        if fields.model:
            found[MODEL].add(str(fields.model))
        elif at(fields, "spec.max_bytes") is not None:
            found[SIZE].add(f"{at(fields, 'spec.min_bytes')}-{at(fields, 'spec.max_bytes')}")
        nodes = (spec.nodes if spec else None) or 1
        found[NODES_RANKS].add(f"{nodes}x{ranks_per_node(result) or fields.world_size or 1}")
        stack = at(fields, "image.stack_digest")
        if isinstance(stack, str) and stack:
            found[STACK_DIGEST].add(stack)
        found[ORIGIN].add(origin_of(result))
    return {key: _joined(key, values) for key, values in found.items() if values}


def describe(
    results: list[Result], *, site: str, created_unix: object, bundle_commit: object, signer_key: str
) -> dict[str, str]:
    """Every annotation of an archive's artifact (keys sorted)."""
    if not SITE_FORM.fullmatch(site):
        raise UsageError(f"site name {site!r} is refused: [A-Za-z0-9_.-], a letter or digit first, at most 64")
    if not FINGERPRINT.fullmatch(signer_key):
        raise UsageError(f"signer key {signer_key!r} is not a SHA256 fingerprint")
    described = {
        CREATED: created(created_unix),
        SITE: site,
        BUNDLE_VERSION: _joined(BUNDLE_VERSION, {str(bundle_commit or "unknown")}),
        RUNS: str(len(results)),
        SIGNER_KEY: signer_key,
        **of_results(results),
    }
    return dict(sorted(described.items()))


def site_named(names: Iterable[str], where: str) -> str:
    """The site of an archive's member names: its one system description, systems/<site>.json."""
    found = [
        name.removeprefix("systems/").removesuffix(".json")
        for name in names
        if name.startswith("systems/") and name.endswith(".json") and name.count("/") == 1
    ]
    if len(found) != 1:
        raise UsageError(
            f"{where} holds {len(found)} system descriptions (systems/<site>.json), not one: "
            "archive it with `fabric-bench archive --system-name SITE`"
        )
    return found[0]


def system_description(archive: Archive) -> tuple[str, bytes]:
    """(site, bytes) of the archive's one system description, systems/<site>.json (signed with it)."""
    site = site_named(archive.members, f"archive {archive.path}")
    return site, archive.members[f"systems/{site}.json"]


def of_archive(archive: Archive, signer_key: str) -> dict[str, str]:
    """The annotations of an archive's artifact, all from the archive (signed) and its signing key."""
    site, _ = system_description(archive)
    return describe(
        list(archive.results().values()),
        site=site,
        created_unix=archive.manifest.get("created_unix"),
        bundle_commit=archive.manifest.get("bundle_commit"),
        signer_key=signer_key,
    )


def checked(found: object, where: str, required: tuple[str, ...] = (SITE,)) -> dict[str, str]:
    """A manifest's (or a layer's) annotations as foreign input: an object of bounded, well-formed
    text holding the `required` keys (a refusal: UsageError, one line)."""
    if found is None:
        return {}
    if not isinstance(found, dict) or len(found) > MAX_ANNOTATIONS:
        raise UsageError(f"{where}: annotations are not an object of at most {MAX_ANNOTATIONS} keys: refused")
    for key, value in found.items():
        if not isinstance(key, str) or not KEY.fullmatch(key):
            raise UsageError(f"{where}: annotation key {terminal(repr(key))[:80]} is refused: [a-z0-9._-]")
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
            raise UsageError(f"{where}: annotation {key} is not text of at most {MAX_VALUE_CHARS} characters: refused")
        if key.startswith(PREFIX) and key not in OURS:
            raise UsageError(f"{where}: annotation {key} is not one this bundle writes: refused")
        if key == CREATED and not CREATED_FORM.fullmatch(value):
            raise UsageError(f"{where}: annotation {key} {terminal(repr(value))[:80]} is not a UTC date: refused")
        if key == SITE and not SITE_FORM.fullmatch(value):
            raise UsageError(f"{where}: annotation {key} {terminal(repr(value))[:80]} is not a site name: refused")
        shape = FINGERPRINT if key == SIGNER_KEY else TOKEN
        if key in OURS and not all(shape.fullmatch(token) for token in tokens(value)):
            raise UsageError(
                f"{where}: annotation {key} {terminal(repr(value))[:80]} holds something other than tokens: refused"
            )
        if key not in OURS and key != CREATED and not value.isprintable():
            raise UsageError(f"{where}: annotation {key} holds a control character: refused")
    for key in required:
        if key not in found:
            raise UsageError(f"{where}: no {key} annotation: refused")
    return dict(found)


def matches(annotations: Mapping[str, str], wanted: Mapping[str, str | None]) -> bool:
    """Every filter given (option name -> value) is one of its annotation's tokens."""
    return all(value is None or value in tokens(annotations.get(FILTERS[name], "")) for name, value in wanted.items())


def differences(declared: Mapping[str, str], computed: Mapping[str, str]) -> list[str]:
    """This bundle's annotations (and the date) that the manifest declares otherwise than the archive says."""
    return [key for key in (CREATED, *OURS) if declared.get(key) != computed.get(key)]
