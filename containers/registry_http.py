"""One HTTP exchange with a registry: the only module of this bundle that opens an HTTP
connection (tests/test_architecture.py holds every other module to it).

    registry = Origin.of(host, plain_http)       the registry's scheme and host[:port]
    exchange(registry, method, url, ...)         -> Answer(status, headers, body)

The rules every request follows, whatever the registry answers:
  - credentials go only to the registry's own origin. `authorization` is attached to a request
    whose scheme and host[:port] are the registry's, and never carried over a redirect (urllib's
    unredirected header): a blob served from another host gets none;
  - a URL the registry names in a header (a tag list's `Link`, an upload's `Location`) is
    resolved by `same_origin`, which refuses one on another host or scheme;
  - redirects: at most MAX_REDIRECTS, over HTTPS only; plain HTTP only where the registry
    itself is plain HTTP (this host, or --insecure), never from HTTPS to HTTP;
  - one deadline for the whole answer (connection, headers, body), however slowly the server
    trickles: past it the exchange is abandoned (a daemon thread that reads no further and
    writes nothing more; its socket times out by itself);
  - a size cap: a Content-Length over it is refused before the body is read, and the body is
    never read past it; a body streamed `into` a file is written chunk by chunk, never held.

Errors are RegistryError, one line; an HTTP error status is an Answer (the caller decides).
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import IO

from containers.host import BuildError

TIMEOUT_S = 30  # one connection attempt or one read
MAX_REDIRECTS = 5
ERROR_BODY_MAX_BYTES = 65536
CHUNK = 1 << 16


class RegistryError(BuildError):
    """One line: what failed and why (the CLI turns it into exit 2)."""


@dataclass(frozen=True)
class Origin:
    """A registry's scheme and host[:port]: what its credentials and its links are bound to."""

    scheme: str
    host: str

    @classmethod
    def of(cls, host: str, plain_http: bool) -> Origin:
        return cls("http" if plain_http else "https", host)

    @property
    def plain_http(self) -> bool:
        return self.scheme == "http"

    def owns(self, url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        return (parts.scheme, parts.netloc) == (self.scheme, self.host)


def same_origin(registry: Origin, base: str, named: str, what: str) -> str:
    """`named` (a Link or Location, relative or absolute) resolved against `base`: refused
    unless it is on the registry's own scheme and host."""
    resolved = urllib.parse.urljoin(base, named.strip())
    if not registry.owns(resolved):
        shown = "".join(c if c.isprintable() else "?" for c in resolved)[:120]
        raise RegistryError(
            f"{what} points to {shown}, not to the registry {registry.scheme}://{registry.host}: refused "
            "(a registry's links stay on its own host)"
        )
    return resolved


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: bytes  # empty when the body went `into` a file


class _Redirects(urllib.request.HTTPRedirectHandler):
    """HTTPS only (plain HTTP where the registry is plain HTTP), never HTTPS -> HTTP, at most
    MAX_REDIRECTS; credentials are unredirected headers, so none follow."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, registry: Origin):
        self.registry = registry

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        scheme = urllib.parse.urlsplit(newurl).scheme
        came_from = urllib.parse.urlsplit(req.full_url).scheme
        if scheme != "https" and not (scheme == "http" == came_from and self.registry.plain_http):
            shown = "".join(c if c.isprintable() else "?" for c in newurl)[:120]
            raise RegistryError(f"the registry redirects to {shown}: refused (not HTTPS)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", exc)
    text = str(reason or type(exc).__name__).splitlines()
    return "".join(c if c.isprintable() else "?" for c in (text[0] if text else type(exc).__name__))[:160]


def exchange(
    registry: Origin,
    method: str,
    url: str,
    *,
    body: bytes | IO[bytes] | None = None,
    headers: dict[str, str] | None = None,
    authorization: str = "",
    max_bytes: int,
    deadline_s: float,
    into: IO[bytes] | None = None,
) -> Answer:
    """One request and its whole answer within `deadline_s` and `max_bytes` (see the module)."""
    if not registry.owns(url):
        raise RegistryError(f"a request to {url[:120]} is not to the registry {registry.host}: refused")
    end = time.monotonic() + deadline_s
    abandoned = threading.Event()
    outcome: dict[str, object] = {}

    def run() -> None:
        request = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)
        if authorization:
            request.add_unredirected_header("Authorization", authorization)
        opener = urllib.request.build_opener(_Redirects(registry))
        try:
            with opener.open(request, timeout=min(TIMEOUT_S, max(deadline_s, 0.1))) as answer:
                length = answer.headers.get("Content-Length", "")
                if length.isdigit() and int(length) > max_bytes and method != "HEAD":  # HEAD: the size, no body
                    raise RegistryError(
                        f"the answer announces {int(length)} bytes, over the {max_bytes} limit: refused"
                    )
                chunks, size = [], 0
                while not abandoned.is_set() and (chunk := answer.read1(CHUNK)):
                    size += len(chunk)
                    if size > max_bytes:
                        raise RegistryError(f"the answer runs past {max_bytes} bytes: refused")
                    if abandoned.is_set():
                        return
                    if into is not None:
                        into.write(chunk)
                    else:
                        chunks.append(chunk)
                outcome["answer"] = Answer(answer.status, answer.headers, b"".join(chunks))
        except urllib.error.HTTPError as exc:
            said = exc.read(ERROR_BODY_MAX_BYTES) if exc.fp else b""
            outcome["answer"] = Answer(exc.code, exc.headers, said)
        except RegistryError as exc:
            outcome["error"] = exc
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            outcome["error"] = RegistryError(f"cannot reach it ({_describe(exc)})")

    worker = threading.Thread(target=run, name="registry-exchange", daemon=True)
    worker.start()
    worker.join(max(0.0, end - time.monotonic()))
    if worker.is_alive():
        abandoned.set()
        raise RegistryError(f"no whole answer within {deadline_s:g} s: abandoned")
    error = outcome.get("error")
    if isinstance(error, RegistryError):
        raise error
    answer = outcome.get("answer")
    if not isinstance(answer, Answer):
        raise RegistryError("no answer")
    return answer
