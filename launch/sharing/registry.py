"""A small client of an OCI registry's HTTP API (the distribution spec): blobs up and down,
manifests by tag or digest, a repository's tags.

HTTPS, except for a registry on this host (127.0.0.1, localhost, [::1]) or with `insecure`
(--insecure), which also allows a token realm or a redirect over plain HTTP. Credentials, where
the registry asks for them: $FABRIC_BENCH_REGISTRY_AUTH as `user:password`, sent as Basic auth or
traded for a bearer token at the realm the registry names (anonymous tokens need none).

A registry is another party: every answer is read within a size (the manifest's, a listing's, a
blob's declared size) and a deadline per read, every manifest and blob is checked against its
digest as it arrives, and an error answer becomes one line (UsageError).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import IO

from containers import oci
from launch.errors import UsageError
from launch.shapes import terminal

DEFAULT_REPOSITORY = "fabric-bench/results"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
TIMEOUT_S = 30  # one connection or one read
BLOB_DEADLINE_S_PER_MIB = 10.0  # the slowest transfer waited for: 0.1 MiB/s, plus TIMEOUT_S
MANIFEST_MAX_BYTES = 1 << 20  # a results manifest is about 2 KiB
LISTING_MAX_BYTES = 4 << 20
TOKEN_MAX_BYTES = 1 << 16
MAX_TAG_PAGES = 100
AUTH_VARIABLE = "FABRIC_BENCH_REGISTRY_AUTH"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes


def _error_line(body: bytes) -> str:
    """The registry's own words from an error answer ({"errors": [{"code", "message"}]}), bounded."""
    try:
        errors = json.loads(body[:4096]).get("errors") or []
        first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
        said = f"{first.get('code', '')} {first.get('message', '')}".strip()
    except (ValueError, AttributeError):
        said = ""
    return terminal(said[:160]) if said else ""


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect (a blob served from elsewhere) over HTTPS only, unless plain HTTP is
    allowed; credentials are not carried to another host."""

    def __init__(self, plain_http: bool):
        self.plain_http = plain_http

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        target = urllib.parse.urlsplit(newurl)
        if target.scheme != "https" and not (target.scheme == "http" and self.plain_http):
            raise UsageError(f"the registry redirects to {terminal(newurl)[:120]}: refused (not HTTPS)")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and target.netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


class Registry:
    """One repository of one registry: REGISTRY/REPO."""

    def __init__(self, host: str, repository: str, insecure: bool = False):
        self.host, self.repository = host, repository
        self.local = oci.Reference(host, repository).local
        self.plain_http = self.local or insecure
        self.base = f"{'http' if self.plain_http else 'https'}://{host}/v2/{repository}"
        self.opener = urllib.request.build_opener(_Redirects(self.plain_http))
        self.authorization = ""

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def pinned(self, digest: str) -> str:
        return f"{self.name}@{digest}"

    # ------------------------------------------------------------ one exchange

    def _send(
        self, method: str, url: str, body: bytes | IO[bytes] | None, headers: dict[str, str], max_bytes: int
    ) -> Answer:
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        try:
            with self.opener.open(request, timeout=TIMEOUT_S) as answer:
                return Answer(answer.status, answer.headers, _bounded(answer, max_bytes, url))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.headers, exc.read(65536) if exc.fp else b"")
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            reason = str(getattr(exc, "reason", exc) or type(exc).__name__).splitlines()[0][:160]
            raise UsageError(f"registry {self.name}: cannot reach it ({terminal(reason)})") from None

    def request(
        self,
        method: str,
        url: str,
        body: bytes | Path | None = None,
        headers: dict[str, str] | None = None,
        max_bytes: int = MANIFEST_MAX_BYTES,
    ) -> Answer:
        """One request; on 401 the registry's challenge is answered once (Basic or a bearer token)."""
        headers = dict(headers or {})
        if isinstance(body, Path):
            headers["Content-Length"] = str(body.stat().st_size)
        for attempt in (1, 2):
            if isinstance(body, Path):
                with body.open("rb") as stream:
                    answer = self._send(method, url, stream, headers, max_bytes)
            else:
                answer = self._send(method, url, body, headers, max_bytes)
            if answer.status != 401 or attempt == 2:
                return answer
            self.authorization = self._authorize(answer.headers.get("WWW-Authenticate", ""))
        return answer

    def _authorize(self, challenge: str) -> str:
        credentials = os.environ.get(AUTH_VARIABLE, "")
        basic = base64.b64encode(credentials.encode()).decode() if credentials else ""
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if not basic:
                raise UsageError(f"registry {self.name} asks for credentials: set {AUTH_VARIABLE}=user:password")
            return f"Basic {basic}"
        if scheme != "bearer":
            raise UsageError(f"registry {self.name}: unauthorized, and no challenge this client can answer")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = fields.pop("realm", "")
        if not realm.startswith("https://") and not (realm.startswith("http://") and self.plain_http):
            raise UsageError(f"registry {self.name}: refusing a token realm that is not HTTPS ({terminal(realm)[:80]})")
        request = urllib.request.Request(f"{realm}?{urllib.parse.urlencode(fields)}")
        if basic:
            request.add_header("Authorization", f"Basic {basic}")
        try:
            with self.opener.open(request, timeout=TIMEOUT_S) as answer:
                found = json.loads(_bounded(answer, TOKEN_MAX_BYTES, realm))
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            raise UsageError(f"registry {self.name}: no token from its realm ({terminal(exc)[:120]})") from None
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
        url = urllib.parse.urljoin(self.base + "/", location)
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"digest": digest})
        put = self.request("PUT", url, data, {"Content-Type": "application/octet-stream"})
        if put.status != 201:
            raise self._refuse(put, f"uploading blob {digest}")

    def fetch_blob(self, digest: str, size_bytes: int, target: Path) -> Path:
        """The blob `digest` of `size_bytes` into `target`: refused when the registry sends more or
        fewer bytes, or bytes of another digest (nothing is left at `target` then)."""
        url = f"{self.base}/blobs/{digest}"
        allowed_s = TIMEOUT_S + BLOB_DEADLINE_S_PER_MIB * size_bytes / 2**20
        deadline = time.monotonic() + allowed_s
        request = urllib.request.Request(url)
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        hashed, received = hashlib.sha256(), 0
        try:
            answer = self.opener.open(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and not self.authorization:
                self.authorization = self._authorize(exc.headers.get("WWW-Authenticate", ""))
                return self.fetch_blob(digest, size_bytes, target)
            raise UsageError(f"registry {self.name}: blob {digest}: answered {exc.code}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            raise UsageError(f"registry {self.name}: cannot reach it ({terminal(exc)[:120]})") from None
        try:
            with answer, open(target, "xb") as out:
                while chunk := answer.read1(1 << 16):
                    received += len(chunk)
                    if received > size_bytes:
                        raise UsageError(f"blob {digest} runs past its declared {size_bytes} bytes: refused")
                    if time.monotonic() > deadline:
                        raise UsageError(f"blob {digest} did not arrive within {allowed_s:.0f} s: refused")
                    hashed.update(chunk)
                    out.write(chunk)
            if received != size_bytes:
                raise UsageError(f"blob {digest} is {received} bytes, not its declared {size_bytes}: refused")
            if "sha256:" + hashed.hexdigest() != digest:
                raise UsageError(
                    f"blob {digest} arrived with digest sha256:{hashed.hexdigest()} (tampered in the registry): refused"
                )
        except (OSError, http.client.HTTPException) as exc:
            target.unlink(missing_ok=True)
            raise UsageError(f"registry {self.name}: blob {digest}: {terminal(exc)[:120]}") from None
        except UsageError:
            target.unlink(missing_ok=True)
            raise
        return target

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
                listed = json.loads(answer.body).get("tags") or []
            except (ValueError, AttributeError):
                raise UsageError(f"registry {self.name}: its tag list is not JSON: refused") from None
            if not isinstance(listed, list) or not all(isinstance(t, str) and TAG.fullmatch(t) for t in listed):
                raise UsageError(f"registry {self.name}: its tag list holds something that is not a tag: refused")
            found += listed
            following = re.search(r"<([^>]+)>", answer.headers.get("Link", ""))
            url = urllib.parse.urljoin(self.base + "/", following.group(1)) if following else None
        return sorted(set(found))


def _bounded(answer: IO[bytes], max_bytes: int, url: str) -> bytes:
    """An answer's body, refused past max_bytes (read no further)."""
    data = answer.read(max_bytes + 1) if max_bytes >= 0 else b""
    if len(data) > max_bytes:
        raise UsageError(f"{terminal(url)[:120]}: the answer runs past {max_bytes} bytes: refused")
    return data


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
