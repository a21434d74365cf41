"""A small client of an OCI registry's HTTP API (the distribution spec): blobs up and down,
manifests by tag or digest, a repository's tags.

HTTPS, except for a registry on this host (127.0.0.1, localhost, [::1]) or with `insecure`
(--insecure), which also allows a token realm or a redirect over plain HTTP. Every exchange goes
through containers.registry_http, whose rules hold here: credentials only to this registry's own
scheme and host, never over a redirect; a tag list's `Link` and an upload's `Location` on another
host or scheme refused; one deadline for each whole answer; a size cap read before the body.

Credentials, where the registry asks for them (containers.registry_auth, per host): the
`user:password` of $FABRIC_BENCH_REGISTRY_AUTH for the registry the command names, else the login
the docker/containers auth files or credential helpers hold for its host; sent as Basic auth or
traded for a bearer token at the realm the registry names (HTTPS only; anonymous tokens need none).

A registry is another party: every answer is read within a size (the manifest's, a listing's, a
blob's declared size) and a deadline ($FABRIC_BENCH_REGISTRY_DEADLINE_S for a small answer; a blob
gets more by its size), every manifest and blob is checked against its digest as it arrives, and
an error answer becomes one line (UsageError).
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
from pathlib import Path
from typing import IO

from containers import oci, registry_auth
from containers.files import sha256_file
from containers.untrusted import UntrustedInput, load_json
from containers.registry_http import Answer, Origin, RegistryError, exchange, same_origin
from launch.errors import UsageError
from launch.shapes import terminal

DEFAULT_REPOSITORY = "fabric-bench/results"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
TIMEOUT_S = 30  # a blob's answer may take this long before its bytes count
DEADLINE_VARIABLE = "FABRIC_BENCH_REGISTRY_DEADLINE_S"
DEADLINE_S = 60.0  # a whole small answer: a manifest, a tag page, a token, an upload's start
BLOB_DEADLINE_S_PER_MIB = 10.0  # the slowest transfer waited for: 0.1 MiB/s, plus TIMEOUT_S
MANIFEST_MAX_BYTES = 1 << 20  # a results manifest is about 2 KiB
LISTING_MAX_BYTES = 4 << 20
TOKEN_MAX_BYTES = 1 << 16
MAX_TAG_PAGES = 100
AUTH_VARIABLE = "FABRIC_BENCH_REGISTRY_AUTH"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

__all__ = ["Answer", "Registry", "at", "sha256_digest"]


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def deadline_s() -> float:
    """The deadline of a whole small answer: $FABRIC_BENCH_REGISTRY_DEADLINE_S (1..3600), else DEADLINE_S."""
    given = os.environ.get(DEADLINE_VARIABLE, "")
    try:
        chosen = float(given) if given else DEADLINE_S
    except ValueError:
        raise UsageError(f"{DEADLINE_VARIABLE}={terminal(given)[:20]!r} is not a number of seconds") from None
    if not 1 <= chosen <= 3600:
        raise UsageError(f"{DEADLINE_VARIABLE}={terminal(given)[:20]} is not within 1..3600 seconds")
    return chosen


def _error_line(body: bytes) -> str:
    """The registry's own words from an error answer ({"errors": [{"code", "message"}]}), bounded."""
    try:
        errors = load_json(body[:4096], "an error answer", 4096, max_depth=4).get("errors") or []
        first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
        said = f"{first.get('code', '')} {first.get('message', '')}".strip()
    except (UntrustedInput, AttributeError):
        said = ""
    return terminal(said[:160]) if said else ""


class Registry:
    """One repository of one registry: REGISTRY/REPO."""

    def __init__(self, host: str, repository: str, insecure: bool = False):
        self.host, self.repository = host, repository
        self.local = oci.Reference(host, repository).local
        self.origin = Origin.of(host, self.local or insecure)
        self.plain_http = self.origin.plain_http
        self.base = f"{self.origin.scheme}://{host}/v2/{repository}"
        self.authorization = ""

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def pinned(self, digest: str) -> str:
        return f"{self.name}@{digest}"

    # ------------------------------------------------------------ one exchange

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | IO[bytes] | None,
        headers: dict[str, str],
        max_bytes: int,
        allowed_s: float | None = None,
        into: IO[bytes] | None = None,
    ) -> Answer:
        try:
            return exchange(
                self.origin,
                method,
                url,
                body=body,
                headers=headers,
                authorization=self.authorization,
                max_bytes=max_bytes,
                deadline_s=allowed_s if allowed_s is not None else deadline_s(),
                into=into,
            )
        except RegistryError as exc:
            raise UsageError(f"registry {self.name}: {terminal(str(exc))[:200]}") from None

    def request(
        self,
        method: str,
        url: str,
        body: bytes | Path | None = None,
        headers: dict[str, str] | None = None,
        max_bytes: int = MANIFEST_MAX_BYTES,
        allowed_s: float | None = None,
        into: IO[bytes] | None = None,
    ) -> Answer:
        """One request; on 401 the registry's challenge is answered once (Basic or a bearer token)."""
        headers = dict(headers or {})
        if isinstance(body, Path):
            headers["Content-Length"] = str(body.stat().st_size)
        for attempt in (1, 2):
            if isinstance(body, Path):
                with body.open("rb") as stream:
                    answer = self._send(method, url, stream, headers, max_bytes, allowed_s, into)
            else:
                answer = self._send(method, url, body, headers, max_bytes, allowed_s, into)
            if answer.status != 401 or attempt == 2:
                return answer
            self.authorization = self._authorize(answer.headers.get("WWW-Authenticate", ""))
        return answer

    def _authorize(self, challenge: str) -> str:
        basic = registry_auth.login_for(self.host, os.environ.get(AUTH_VARIABLE, ""))
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if not basic:
                raise UsageError(
                    f"registry {self.name} asks for credentials: set {AUTH_VARIABLE}=user:password, "
                    f"or log in to {self.host} (podman login, docker login)"
                )
            return basic
        if scheme != "bearer":
            raise UsageError(f"registry {self.name}: unauthorized, and no challenge this client can answer")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm", "")
        parts = urllib.parse.urlsplit(realm)
        if parts.scheme != "https" and not (parts.scheme == "http" and self.plain_http):
            raise UsageError(f"registry {self.name}: refusing a token realm that is not HTTPS ({terminal(realm)[:80]})")
        where = Origin(parts.scheme, parts.netloc)
        try:
            answer = exchange(
                where,
                "GET",
                f"{realm}?{urllib.parse.urlencode(fields)}",
                authorization=basic,
                max_bytes=TOKEN_MAX_BYTES,
                deadline_s=deadline_s(),
            )
            found = (
                load_json(answer.body, "the token answer", TOKEN_MAX_BYTES, max_depth=4)
                if answer.status == 200
                else None
            )
        except (RegistryError, UntrustedInput) as exc:
            raise UsageError(f"registry {self.name}: no token from its realm ({terminal(str(exc))[:120]})") from None
        token = (found.get("token") or found.get("access_token")) if isinstance(found, dict) else None
        if not isinstance(token, str) or not token.isprintable() or not token:
            raise UsageError(f"registry {self.name}: its realm answered without a token")
        return f"Bearer {token}"

    def _refuse(self, answer: Answer, what: str) -> UsageError:
        said = _error_line(answer.body)
        return UsageError(f"registry {self.name}: {what}: answered {answer.status}{': ' + said if said else ''}")

    # ------------------------------------------------------------ blobs

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", f"{self.base}/blobs/{digest}", max_bytes=0).status == 200

    def push_blob(self, data: bytes | Path, digest: str) -> None:
        """Upload a blob (one monolithic PUT), unless the repository holds it already."""
        if self.has_blob(digest):
            return
        started = self.request("POST", f"{self.base}/blobs/uploads/", b"")
        location = started.headers.get("Location", "") if started.status == 202 else ""
        if not location:
            raise self._refuse(started, "starting an upload")
        url = self._own(location, "the upload's Location")
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        size = data.stat().st_size if isinstance(data, Path) else len(data)
        allowed_s = TIMEOUT_S + BLOB_DEADLINE_S_PER_MIB * size / 2**20  # the body goes up at 0.1 MiB/s at least
        put = self.request("PUT", url, data, {"Content-Type": "application/octet-stream"}, allowed_s=allowed_s)
        if put.status != 201:
            raise self._refuse(put, f"uploading blob {digest}")

    def fetch_blob(self, digest: str, size_bytes: int, target: Path) -> Path:
        """The blob `digest` of `size_bytes` into `target`, within TIMEOUT_S plus its size at
        0.1 MiB/s: refused when the registry sends more or fewer bytes, or bytes of another
        digest (nothing is left at `target` then)."""
        allowed_s = TIMEOUT_S + BLOB_DEADLINE_S_PER_MIB * size_bytes / 2**20
        try:
            with open(target, "xb") as out:
                answer = self.request(
                    "GET", f"{self.base}/blobs/{digest}", max_bytes=size_bytes, allowed_s=allowed_s, into=out
                )
            if answer.status != 200:
                raise self._refuse(answer, f"blob {digest}")
            received, hashed = target.stat().st_size, file_digest(target)
            if received != size_bytes:
                raise UsageError(f"blob {digest} is {received} bytes, not its declared {size_bytes}: refused")
            if hashed != digest:
                raise UsageError(f"blob {digest} arrived with digest {hashed} (tampered in the registry): refused")
        except OSError as exc:
            target.unlink(missing_ok=True)
            raise UsageError(f"registry {self.name}: blob {digest}: {terminal(str(exc))[:120]}") from None
        except UsageError:
            target.unlink(missing_ok=True)
            raise
        return target

    def fetch_small_blob(self, digest: str, size_bytes: int) -> bytes:
        """A small blob (a signed manifest, a system description) in memory, checked like fetch_blob."""
        answer = self.request("GET", f"{self.base}/blobs/{digest}", max_bytes=size_bytes)
        if answer.status != 200:
            raise self._refuse(answer, f"blob {digest}")
        if len(answer.body) != size_bytes or sha256_digest(answer.body) != digest:
            raise UsageError(
                f"blob {digest} is not the {size_bytes} bytes of that digest (tampered in the registry): refused"
            )
        return answer.body

    def _own(self, named: str, what: str) -> str:
        """A URL the registry names in a header, on this registry's own scheme and host only."""
        try:
            return same_origin(self.origin, self.base + "/", named, f"registry {self.name}: {what}")
        except RegistryError as exc:
            raise UsageError(terminal(str(exc))) from None

    # ------------------------------------------------------------ manifests and tags

    def put_manifest(self, tag: str, manifest: bytes) -> str:
        """PUT the manifest under `tag`; returns its digest (checked against the registry's)."""
        digest = sha256_digest(manifest)
        answer = self.request("PUT", f"{self.base}/manifests/{tag}", manifest, {"Content-Type": MANIFEST_MEDIA_TYPE})
        if answer.status != 201:
            raise self._refuse(answer, f"storing the manifest as {tag}")
        claimed = answer.headers.get("Docker-Content-Digest", "")
        if claimed and claimed != digest:
            raise UsageError(f"registry {self.name} stored the manifest as {terminal(claimed)[:80]}, not {digest}")
        return digest

    def manifest(self, reference: str) -> tuple[str, bytes]:
        """(digest, bytes) of the manifest at a tag or digest, bounded; by digest, the bytes must hash to it."""
        answer = self.request("GET", f"{self.base}/manifests/{reference}", headers={"Accept": MANIFEST_MEDIA_TYPE})
        if answer.status != 200:
            raise self._refuse(answer, f"manifest {terminal(reference)[:80]}")
        digest = sha256_digest(answer.body)
        if DIGEST.fullmatch(reference) and digest != reference:
            raise UsageError(f"{self.pinned(reference)}: the registry served a manifest with digest {digest}: refused")
        return digest, answer.body

    def tags(self) -> list[str]:
        """The repository's tags (none: an empty or absent repository), page by page."""
        url: str | None = f"{self.base}/tags/list?n=1000"
        found: list[str] = []
        for _ in range(MAX_TAG_PAGES):
            if url is None:
                break
            answer = self.request("GET", url, max_bytes=LISTING_MAX_BYTES)
            if answer.status == 404:
                return []
            if answer.status != 200:
                raise self._refuse(answer, "listing tags")
            try:
                listed = load_json(answer.body, "its tag list", LISTING_MAX_BYTES, max_depth=4).get("tags") or []
            except (UntrustedInput, AttributeError):
                raise UsageError(f"registry {self.name}: its tag list is not JSON: refused") from None
            if not isinstance(listed, list) or not all(isinstance(t, str) and TAG.fullmatch(t) for t in listed):
                raise UsageError(f"registry {self.name}: its tag list holds something that is not a tag: refused")
            found += listed
            following = re.search(r"<([^>]+)>", answer.headers.get("Link", ""))
            url = self._own(following.group(1), "the tag list's Link") if following else None
        return sorted(set(found))


def file_digest(path: Path) -> str:
    return "sha256:" + sha256_file(path)


def at(text: str, insecure: bool = False) -> tuple[Registry, str]:
    """(the repository, the manifest digest or '') of REGISTRY[/REPO][@sha256:...]; the repository
    defaults to DEFAULT_REPOSITORY."""
    bare = text.strip()
    if "/" not in bare.split("@", 1)[0]:
        head, sep, digest = bare.partition("@")
        bare = f"{head}/{DEFAULT_REPOSITORY}{sep}{digest}"
    try:
        ref = oci.parse(bare)
    except oci.RegistryError:
        raise UsageError(f"not a repository: {text!r} (expected REGISTRY[:PORT][/REPO][@sha256:...])") from None
    if ref.tag:
        raise UsageError(f"{text!r}: name a repository (REGISTRY/REPO) or a digest (@sha256:...), not a tag")
    return Registry(ref.host, ref.name, insecure), ref.digest
