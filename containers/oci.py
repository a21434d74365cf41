"""Images through an OCI registry: push, resolve, and pull pinned by digest.

Apptainer moves a SIF as an ORAS artifact (`apptainer push X.sif oras://HOST/NAME:TAG`): the
manifest's one layer is the SIF itself, so the layer digest IS the SIF's sha256, the digest the
bundle records as the image's (and a fabric image's `stack-digest` label). podman pushes an OCI
image; its image id (the config digest) survives the round trip. Either way a pull names the
manifest digest (`HOST/NAME@sha256:...`), never a tag alone, and the caller checks what arrived.

Credentials are the runtimes' own (`apptainer registry login`, `podman login`): this module
reads the same auth files and credential helpers (containers.registry_auth, per host) only to
resolve a tag to its manifest digest, and sends them only to that host (containers.registry_http:
never over a redirect). Plain HTTP (`insecure`) is allowed for a registry on this host only.

A registry is another party: what this module reads from one is bounded (MANIFEST_MAX_BYTES,
a deadline per answer however slowly it trickles), checked against the digest asked for, and
parsed as untrusted JSON (containers/untrusted.py). The blobs themselves are fetched by the
runtime, which checks each against its digest; the pulled image's digest is checked again here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from containers.digest import remembered_sha256
from containers import registry_auth
from containers.host import RUNTIMES, cache_dir, runtime_binary
from containers.registry_http import Answer, Origin, RegistryError, exchange
from containers.untrusted import UntrustedInput, load_json

LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
SIF_LAYER = "application/vnd.sylabs.sif.layer.v1.sif"
TIMEOUT_S = 30  # one connection attempt or one read
DEADLINE_S = 60  # a whole answer, however slowly it comes
MANIFEST_MAX_BYTES = 4 << 20  # a manifest is a few KiB
TOKEN_MAX_BYTES = 1 << 20
MAX_IMAGE_BYTES = 1 << 40  # what a manifest may declare (the largest images here are ~5 GiB)
PULL_BASE_S = 600  # a pull's start-up, unpacking (podman) and checks
PULL_MIN_BYTES_PER_S = 1 << 20  # the slowest transfer a pull is waited for
_HOST = r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?|\[::1\](?::[0-9]{1,5})?)"  # never an option
_NAME = r"(?P<name>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
_REFERENCE = re.compile(
    rf"^{_HOST}/{_NAME}(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


@dataclass(frozen=True)
class Reference:
    host: str
    name: str
    tag: str = ""
    digest: str = ""  # the manifest's digest, sha256:...

    @property
    def local(self) -> bool:
        return self.host.rsplit(":", 1)[0] in LOCAL_HOSTS or self.host.startswith("[::1]")

    def by_tag(self) -> str:
        return f"{self.host}/{self.name}:{self.tag or 'latest'}"

    def by_digest(self) -> str:
        if not self.digest:
            raise RegistryError(f"{self} names no digest: a pull is pinned by digest (NAME@sha256:...)")
        return f"{self.host}/{self.name}@{self.digest}"

    def __str__(self) -> str:
        return (
            f"{self.host}/{self.name}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def parse(text: str) -> Reference:
    """HOST[:PORT]/NAME[:TAG][@sha256:HEX] (an `oras://` or `docker://` prefix is dropped)."""
    bare = re.sub(r"^(oras|docker)://", "", text.strip())
    match = _REFERENCE.match(bare)
    if not match:
        raise RegistryError(f"not an image reference: {text!r} (expected HOST[:PORT]/NAME[:TAG][@sha256:...])")
    return Reference(match["host"], match["name"], match["tag"] or "", match["digest"] or "")


def _check_insecure(ref: Reference, insecure: bool) -> None:
    if insecure and not ref.local:
        raise RegistryError(f"plain HTTP (--insecure) only for a registry on this host, not {ref.host}")


@dataclass(frozen=True)
class Pushed:
    reference: str  # HOST/NAME@sha256:MANIFEST
    manifest_digest: str
    image_digest: str  # apptainer: the SIF's sha256 (= its layer); podman: the image id


@dataclass(frozen=True)
class Pulled:
    image: str  # .sif path (apptainer) or local image name (podman)
    image_digest: str
    reference: str


# ---------------------------------------------------------------- resolving tags


def _token(challenge: str, ref: Reference, registry: Origin, deadline_s: float = DEADLINE_S) -> str:
    """A bearer token for a `WWW-Authenticate: Bearer realm=...` challenge (the login's, or anonymous)."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.pop("realm", "")
    parts = urllib.parse.urlsplit(realm)
    if parts.scheme != "https" and not (parts.scheme == "http" and registry.plain_http):
        raise RegistryError(f"refusing a token realm over plain HTTP ({realm!r:.80})")
    answer = exchange(
        Origin(parts.scheme, parts.netloc),
        "GET",
        f"{realm}?{urllib.parse.urlencode(fields)}",
        authorization=registry_auth.login_for(ref.host),
        max_bytes=TOKEN_MAX_BYTES,
        deadline_s=deadline_s,
    )
    if answer.status != 200:
        raise RegistryError(f"the token realm answered {answer.status}")
    try:
        said = load_json(answer.body, "the token answer", TOKEN_MAX_BYTES)
    except UntrustedInput as exc:
        raise RegistryError(str(exc)) from None
    token = (said.get("token") or said.get("access_token")) if isinstance(said, dict) else None
    if not isinstance(token, str) or not token.isprintable():
        raise RegistryError("the token answer holds no token")
    return token


def manifest(ref: Reference, insecure: bool = False, deadline_s: float = DEADLINE_S) -> tuple[str, dict]:
    """(digest, manifest) of ref's tag or digest, as the registry serves it: its bytes hash to
    the digest asked for (and to the one the registry claims), within MANIFEST_MAX_BYTES and
    deadline_s for each request (containers.registry_http's rules), a JSON object whose layers
    are objects. The login is the one the auth files hold for ref's host (registry_auth)."""
    _check_insecure(ref, insecure)
    registry = Origin.of(ref.host, insecure or ref.local)
    url = f"{registry.scheme}://{ref.host}/v2/{ref.name}/manifests/{ref.digest or ref.tag or 'latest'}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}

    def get(authorization: str) -> Answer:
        return exchange(
            registry, "GET", url, headers=headers, authorization=authorization,
            max_bytes=MANIFEST_MAX_BYTES, deadline_s=deadline_s,
        )  # fmt: skip

    try:
        answered = get(registry_auth.login_for(ref.host))
        challenge = answered.headers.get("WWW-Authenticate", "") if answered.status == 401 else ""
        if challenge.lower().startswith("bearer"):
            answered = get(f"Bearer {_token(challenge, ref, registry, deadline_s)}")
    except RegistryError as exc:
        raise RegistryError(f"{ref}: {exc}") from None
    if answered.status != 200:
        raise RegistryError(f"{ref}: the registry answered {answered.status}")
    body, digest = answered.body, answered.headers.get("Docker-Content-Digest", "")
    computed = "sha256:" + hashlib.sha256(body).hexdigest()
    if digest and digest != computed:
        raise RegistryError(
            f"{ref}: the manifest's bytes hash to {computed}, not the {digest[:80]} the registry claims"
        )
    if ref.digest and computed != ref.digest:
        raise RegistryError(f"{ref}: the registry served a manifest with digest {computed}")
    try:
        data = load_json(body, f"{ref}: the manifest", MANIFEST_MAX_BYTES)
    except UntrustedInput as exc:
        raise RegistryError(str(exc)) from None
    layers = data.get("layers", []) if isinstance(data, dict) else None
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise RegistryError(f"{ref}: the manifest is not an object with a list of layers")
    return computed, data


# ---------------------------------------------------------------- runtimes


def _run(argv: list[str], what: str, env: dict | None = None, timeout: float = 3600) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryError(f"{what} failed: {exc}") from None
    if out.returncode != 0:
        lines = [line for line in (out.stderr + out.stdout).strip().splitlines() if line.strip()]
        raise RegistryError(f"{what} failed (exit {out.returncode}): {lines[-1] if lines else ''}")
    return out.stdout


def podman_env() -> dict[str, str]:
    """podman as builds run it here (runc, ulimits without CAP_SYS_RESOURCE)."""
    conf = cache_dir() / "podman-containers.conf"
    env = dict(os.environ)
    if conf.is_file():
        env.setdefault("CONTAINERS_CONF", str(conf))
    return env


def runroot(store: Path) -> Path:
    """The run-state folder of an image store: podman refuses a runroot longer than 50
    characters, so it lives under the temporary folder, named by the store's path."""
    key = hashlib.sha256(str(Path(store).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"fb-podman-{key}"


def podman(store: Path | None = None) -> list[str]:
    """podman's argv head; with `store`, its own image store under that folder (a second site's)."""
    head = [runtime_binary("podman")]
    if store is not None:
        head += ["--root", str(Path(store) / "storage"), "--runroot", str(runroot(store))]
    return head


def podman_id(image: str, store: Path | None = None) -> str:
    out = _run(
        [*podman(store), "image", "inspect", "--format", "{{.Id}}", image],
        f"podman image inspect {image}",
        env=podman_env(),
    )
    return "sha256:" + out.strip().removeprefix("sha256:")


def push(
    image: str, target: str, runtime: str = "apptainer", insecure: bool = False, store: Path | None = None
) -> Pushed:
    """Push a .sif (apptainer, as ORAS) or a local image (podman; from `store` when given) to
    `target` (HOST/NAME:TAG)."""
    if runtime not in RUNTIMES:
        raise RegistryError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    ref = parse(target)
    if ref.digest:
        raise RegistryError(f"push to a tag, not a digest: {target}")
    _check_insecure(ref, insecure)
    binary = runtime_binary(runtime)
    if runtime == "apptainer":
        if not Path(image).is_file():
            raise RegistryError(f"image not found: {image}")
        sif_digest = "sha256:" + remembered_sha256(image, cache_dir())
        _run([binary, "push", str(image), f"oras://{ref.by_tag()}"], f"apptainer push to {ref.by_tag()}")
        digest, body = manifest(Reference(ref.host, ref.name, ref.tag or "latest"), insecure)
        layers = [layer.get("digest") for layer in body.get("layers", []) if layer.get("mediaType") == SIF_LAYER]
        if layers != [sif_digest]:
            raise RegistryError(f"{ref.by_tag()}: the pushed manifest's SIF layer is {layers}, not {sif_digest}")
        return Pushed(f"{ref.host}/{ref.name}@{digest}", digest, sif_digest)
    image_id = podman_id(image, store)
    with tempfile.TemporaryDirectory(prefix="fabric-bench-push.") as work:
        digestfile = Path(work) / "digest"
        # zstd: gzip (podman's default) packs a multi-GB image at a few MB/s on two cores
        argv = [*podman(store), "push", "--digestfile", str(digestfile), "--compression-format", "zstd"]
        if insecure or ref.local:
            argv.append("--tls-verify=false")
        _run([*argv, image, ref.by_tag()], f"podman push to {ref.by_tag()}", env=podman_env())
        digest = digestfile.read_text().strip()
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise RegistryError(f"podman push reported no manifest digest ({digest!r})")
    return Pushed(f"{ref.host}/{ref.name}@{digest}", digest, image_id)


def pull_timeout_s(ref: Reference, insecure: bool, deadline_s: float = DEADLINE_S) -> float:
    """How long the runtime may take to pull ref: the pinned manifest is read first (bounded,
    checked against its digest: a registry that does not answer, or answers with something
    else, is refused before the runtime starts, which would wait on a silent registry for ever),
    and the pull gets PULL_BASE_S plus its blobs' declared size at PULL_MIN_BYTES_PER_S."""
    _, body = manifest(ref, insecure, deadline_s)
    blobs = [*body.get("layers", []), *([body["config"]] if isinstance(body.get("config"), dict) else [])]
    sizes = [blob.get("size") for blob in blobs]
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in sizes):
        raise RegistryError(f"{ref}: the manifest gives a blob without a size")
    total = sum(sizes)
    if total > MAX_IMAGE_BYTES:
        raise RegistryError(
            f"{ref}: the manifest's blobs add up to {total} bytes, over the {MAX_IMAGE_BYTES // 2**30} GiB limit"
        )
    return PULL_BASE_S + total / PULL_MIN_BYTES_PER_S


def pull(
    reference: str,
    runtime: str = "apptainer",
    out: Path | None = None,
    insecure: bool = False,
    local_name: str = "",
    store: Path | None = None,
    deadline_s: float = DEADLINE_S,
) -> Pulled:
    """Pull HOST/NAME@sha256:MANIFEST: apptainer to `out` (a .sif path), podman into its store
    (or `store`; tagged `local_name` when given), within pull_timeout_s. The image's digest is
    computed from what arrived."""
    if runtime not in RUNTIMES:
        raise RegistryError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    ref = parse(reference)
    pinned = ref.by_digest()
    _check_insecure(ref, insecure)
    binary = runtime_binary(runtime)
    if runtime == "apptainer" and out is None:
        raise RegistryError("apptainer pull needs an output path (--out X.sif)")
    timeout = pull_timeout_s(ref, insecure, deadline_s)
    if runtime == "apptainer":
        out = Path(str(out))
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        # --disable-cache: apptainer would keep a second copy of every pulled SIF in its cache
        # (21 GiB of them here after a few round trips of the 4.2 GiB cpu-debian images)
        argv = [binary, "pull", "--force", "--disable-cache"]
        if insecure:
            argv.append("--no-https")
        try:
            _run([*argv, str(partial), f"oras://{pinned}"], f"apptainer pull of {pinned}", timeout=timeout)
            partial.rename(out)
        finally:
            partial.unlink(missing_ok=True)
        return Pulled(str(out), "sha256:" + remembered_sha256(out, cache_dir()), pinned)
    argv = [*podman(store), "pull", "-q"]
    if insecure or ref.local:
        argv.append("--tls-verify=false")
    env = podman_env()
    _run([*argv, pinned], f"podman pull of {pinned}", env=env, timeout=timeout)
    image = pinned
    if local_name:
        _run([*podman(store), "tag", pinned, local_name], f"podman tag {local_name}", env=env)
        image = local_name
    return Pulled(image, podman_id(pinned, store), pinned)


def labels(image: str, runtime: str = "apptainer", store: Path | None = None) -> dict:
    """An image's labels: a SIF's (`apptainer inspect`), or a podman image's (from `store`)."""
    if runtime == "apptainer":
        if not Path(image).is_file():
            raise RegistryError(f"image not found: {image}")
        out = _run([runtime_binary(runtime), "inspect", "--json", "--labels", image], f"apptainer inspect {image}")
        found = json.loads(out)["data"]["attributes"].get("labels")
    else:
        out = _run(
            [*podman(store), "image", "inspect", "--format", "{{json .Labels}}", image],
            f"podman image inspect {image}",
            env=podman_env(),
        )
        found = json.loads(out or "{}")
    return {str(k): str(v) for k, v in (found or {}).items()}


def discard(image: str, runtime: str = "apptainer", store: Path | None = None) -> None:
    """Remove a pulled image that failed its check: the .sif, or the podman image."""
    if runtime == "apptainer":
        Path(image).unlink(missing_ok=True)
    else:
        subprocess.run([*podman(store), "rmi", "-f", image], capture_output=True, env=podman_env())
