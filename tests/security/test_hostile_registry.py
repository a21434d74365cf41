"""A registry is another party: one that serves another manifest than the digest asked for,
lies about its digest, answers with 10 GB, never ends, trickles, never answers, or nests its
JSON 100k deep is refused in one line within bounded time and memory (issue 41). The hostile
registry is a real HTTP server on 127.0.0.1 in this process; the tampered blob is served by
the real docker-registry and pulled by the real podman."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import socket
import subprocess
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from containers import local_registry, oci
from tests.conftest import fabric_bench, need

MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": oci.MANIFEST_TYPES[0],
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64, "size": 2},
        "layers": [{"mediaType": oci.SIF_LAYER, "digest": "sha256:" + "d" * 64, "size": 1}],
    }
).encode()
OTHER = MANIFEST.replace(b'"size": 1', b'"size": 2')


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Hostile(BaseHTTPRequestHandler):
    """Answers every GET the way `self.server.behaviour` names."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def send(self, body: bytes, digest: str | None = None, status: int = 200, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", oci.MANIFEST_TYPES[0])
        self.send_header("Content-Length", str(len(body)))
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server = self.server
        behaviour = server.behaviour  # type: ignore[attr-defined]
        server.requests += 1  # type: ignore[attr-defined]
        try:
            getattr(self, behaviour)()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def another_manifest(self) -> None:  # asked for MANIFEST's digest, serves OTHER
        self.send(OTHER, sha(OTHER))

    def lying_digest(self) -> None:  # claims a digest its bytes do not have
        self.send(MANIFEST, sha(OTHER))

    def ten_gigabytes(self) -> None:  # announces 10 GB and sends zeros until stopped
        self.send_response(200)
        self.send_header("Content-Length", str(10 * 2**30))
        self.end_headers()
        self._endless()

    def endless_chunked(self) -> None:  # no length: chunks forever
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"[" * 65536
        while not self.server.stopping.is_set():  # type: ignore[attr-defined]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    def trickle(self) -> None:  # a byte at a time, forever
        self.send_response(200)
        self.send_header("Content-Length", str(len(MANIFEST)))
        self.end_headers()
        while not self.server.stopping.wait(0.05):  # type: ignore[attr-defined]
            self.wfile.write(b" ")
            self.wfile.flush()

    def silent_after_headers(self) -> None:  # headers, then nothing, the connection held open
        self.send_response(200)
        self.send_header("Content-Length", str(len(MANIFEST)))
        self.end_headers()
        self.wfile.flush()
        self.server.stopping.wait()  # type: ignore[attr-defined]

    def endless_headers(self) -> None:  # headers, one after another, never the body
        self.send_response(200)
        for i in range(10_000):
            if self.server.stopping.is_set():  # type: ignore[attr-defined]
                break
            self.send_header(f"X-Filler-{i}", "x" * 100)
            self.wfile.write(b"".join(self._headers_buffer))
            self._headers_buffer = []

    def nesting_bomb(self) -> None:  # by tag, its own digest told honestly
        body = b"[" * 100_000 + b"]" * 100_000
        self.send(body, sha(body))

    def not_an_object(self) -> None:
        body = b'{"layers": [1, 2]}'
        self.send(body, sha(body))

    def token_bomb(self) -> None:  # the manifest asks for a token; the token is a bomb
        if self.path.startswith("/token"):
            body = b"[" * 100_000
            self.send(body)
        else:
            realm = f"http://127.0.0.1:{self.server.server_port}/token"
            self.send(b"{}", status=401, WWW_Authenticate=f'Bearer realm="{realm}",service="x"')

    def honest(self) -> None:  # serves server.body, whatever it declares
        body = self.server.body  # type: ignore[attr-defined]
        self.send(body, sha(body))

    def _endless(self) -> None:
        block = bytes(1 << 16)
        while not self.server.stopping.is_set():  # type: ignore[attr-defined]
            self.wfile.write(block)


@pytest.fixture
def hostile():
    """Start a hostile registry with behaviour B: `hostile(B)` -> its 127.0.0.1:PORT."""
    servers = []

    def start(behaviour: str, body: bytes = b"") -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
        server.daemon_threads = True
        server.behaviour, server.requests, server.stopping = behaviour, 0, threading.Event()
        server.body = body
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def refused(address: str, digest: str = "", deadline_s: float = 3) -> tuple[str, float, int]:
    """(the one-line refusal, seconds taken, peak bytes allocated) of a manifest request."""
    ref = oci.parse(f"{address}/fb/stack" + (f"@{digest}" if digest else ":v1"))
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(oci.RegistryError) as caught:
            oci.manifest(ref, deadline_s=deadline_s)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(ref)), message
    return message, time.monotonic() - started, peak


def test_a_manifest_other_than_the_digest_asked_for_is_refused(hostile):
    message, _, _ = refused(hostile("another_manifest"), sha(MANIFEST))
    assert f"served a manifest with digest {sha(OTHER)}" in message


def test_a_digest_the_bytes_do_not_have_is_refused(hostile):
    message, _, _ = refused(hostile("lying_digest"))
    assert f"hash to {sha(MANIFEST)}, not the {sha(OTHER)} the registry claims" in message


@pytest.mark.parametrize(
    "behaviour, line",
    [
        ("ten_gigabytes", f"announces {10 * 2**30} bytes, over the {oci.MANIFEST_MAX_BYTES} limit"),
        ("endless_chunked", f"runs past {oci.MANIFEST_MAX_BYTES} bytes: refused"),
    ],
)
def test_a_huge_or_endless_answer_is_refused_without_holding_it(hostile, behaviour, line):
    message, seconds, peak = refused(hostile(behaviour))
    assert line in message
    assert seconds < 3 and peak < 3 * oci.MANIFEST_MAX_BYTES, (seconds, peak)


@pytest.mark.parametrize("behaviour", ["trickle", "silent_after_headers", "endless_headers"])
def test_a_registry_that_never_finishes_its_answer_is_refused_within_a_bound(hostile, behaviour):
    message, seconds, _ = refused(hostile(behaviour), deadline_s=1.5)
    assert "no whole answer within 1.5 s" in message or "cannot reach it" in message, message
    assert seconds < 2.5, seconds


def test_a_registry_that_accepts_and_never_answers_is_given_up_on():
    with socket.socket() as listener:  # a TCP listener that never reads nor writes
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        message, seconds, _ = refused(f"127.0.0.1:{listener.getsockname()[1]}", deadline_s=1)
    assert "no whole answer within 1 s" in message and seconds < 2, (message, seconds)


@pytest.mark.parametrize(
    "behaviour, line",
    [
        ("nesting_bomb", "the manifest is nested more than 64 levels deep"),
        ("not_an_object", "the manifest is not an object with a list of layers"),
        ("token_bomb", "the token answer is nested more than 64 levels deep"),
    ],
)
def test_a_manifest_or_token_of_hostile_json_is_one_line(hostile, behaviour, line):
    message, _, _ = refused(hostile(behaviour))
    assert line in message


def declaring(**layer) -> bytes:
    return json.dumps(
        {"schemaVersion": 2, "layers": [{"mediaType": "x", "digest": "sha256:" + "d" * 64, **layer}]}
    ).encode()


@pytest.mark.parametrize(
    "behaviour, body, line",
    [
        # on a loaded machine the headers themselves may come after the deadline: refused as well
        ("silent_after_headers", b"", r"no whole answer within 1.5 s|cannot reach it \(timed out\)"),
        ("another_manifest", MANIFEST, "served a manifest with digest"),
        ("honest", declaring(size=2 * 2**40), "the manifest's blobs add up to 2199023255552 bytes, over the 1024 GiB"),
        ("honest", declaring(size="1"), "the manifest gives a blob without a size"),
        ("honest", declaring(), "the manifest gives a blob without a size"),
    ],
)
def test_a_pull_reads_the_pinned_manifest_first_and_never_starts_the_runtime_on_a_hostile_one(
    hostile, tmp_path, behaviour, body, line
):
    """podman waits on a registry that never answers for ever (> 100 s seen here): the pull
    reads the pinned manifest itself first, bounded, and sizes the runtime's time limit by it."""
    need(shutil.which("podman") is not None, "podman not installed")
    reference = f"{hostile(behaviour, body)}/fb/stack@{sha(body or MANIFEST)}"
    started = time.monotonic()
    with pytest.raises(oci.RegistryError, match=line):
        oci.pull(reference, "podman", store=tmp_path / "store", deadline_s=1.5)
    assert time.monotonic() - started < 3 and not (tmp_path / "store").exists()


def test_an_honest_manifest_gives_the_pull_a_time_limit_by_its_size(hostile):
    body = declaring(size=3 * 2**30)
    ref = oci.parse(f"{hostile('honest', body)}/fb/stack@{sha(body)}")
    assert oci.pull_timeout_s(ref, False) == oci.PULL_BASE_S + 3 * 2**30 / oci.PULL_MIN_BYTES_PER_S


@pytest.mark.parametrize(
    "text", [f"-oProxyCommand=x/fb/stack@{'sha256:' + 'a' * 64}", f"--tls-verify=false/fb/stack@{'sha256:' + 'a' * 64}"]
)
def test_a_reference_that_a_runtime_would_read_as_an_option_is_not_a_reference(text):
    """podman takes the pinned reference as a positional argument: it must not start with '-'."""
    with pytest.raises(oci.RegistryError, match="not an image reference"):
        oci.parse(text)


def _podman_image(store: Path, tmp_path: Path) -> str:
    """A one-file image in its own podman store (`podman import` of a tar of a tiny rootfs)."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hello").write_text("fabric-bench\n")
    tarball = tmp_path / "rootfs.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tarball), "."], check=True)
    subprocess.run(
        [*oci.podman(store), "import", "-q", str(tarball), "localhost/tiny:1"],
        check=True,
        capture_output=True,
        env=oci.podman_env(),
        timeout=120,
    )
    return "localhost/tiny:1"


@pytest.mark.parametrize("blob", ["layer", "config"])
def test_a_blob_changed_on_the_registry_s_disk_is_refused_by_the_pull(tmp_path, blob, request):
    """The real docker-registry serves a blob whose bytes were changed on its disk (same size,
    still filed under its digest): `image pull` refuses in one line, no image left in the store.
    The stores' run-state folders (outside tmp_path: oci.runroot) go when it ends."""
    need(local_registry.available() and shutil.which("podman") is not None, "docker-registry and podman")
    source, target = tmp_path / "site-a", tmp_path / "site-b"
    for store in (source, target):
        request.addfinalizer(functools.partial(shutil.rmtree, oci.runroot(store), ignore_errors=True))
    with local_registry.LocalRegistry(tmp_path / "registry") as registry:
        pushed = oci.push(_podman_image(source, tmp_path), f"{registry.address}/fb/tiny:1", "podman", store=source)
        _, body = oci.manifest(oci.parse(pushed.reference))
        digest = body["layers"][0]["digest"] if blob == "layer" else body["config"]["digest"]
        hexdigest = digest.removeprefix("sha256:")
        stored = tmp_path / "registry" / "data" / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
        data = bytearray(stored.read_bytes())
        data[len(data) // 2] ^= 0xFF
        stored.write_bytes(bytes(data))
        proc = fabric_bench(
            "image",
            "pull",
            pushed.reference,
            "--runtime",
            "podman",
            "--podman-store",
            str(target),
            "--expect-digest",
            pushed.image_digest,
            timeout=300,
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"podman pull of {pushed.reference} failed" in proc.stderr and "Traceback" not in proc.stderr
        assert f"does not match expected {digest}" in proc.stderr or "Digest did not match" in proc.stderr, proc.stderr
        listed = subprocess.run(
            [*oci.podman(target), "images", "-q"], capture_output=True, text=True, env=oci.podman_env(), timeout=60
        )
        assert listed.returncode == 0 and listed.stdout.strip() == ""


def test_a_sif_changed_on_the_registry_s_disk_leaves_nothing_at_out(tmp_path):
    """apptainer (ORAS): the SIF layer's bytes changed on the real registry's disk; the pull is
    refused in one line and neither the .sif nor its .partial is left."""
    need(local_registry.available() and shutil.which("apptainer") is not None, "docker-registry and apptainer")
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("fabric-bench\n")
    sif = tmp_path / "small.sif"
    subprocess.run(["apptainer", "build", "--force", str(sif), str(tree)], check=True, capture_output=True, timeout=300)
    with local_registry.LocalRegistry(tmp_path / "registry") as registry:
        pushed = oci.push(str(sif), f"{registry.address}/fb/small:1")
        hexdigest = pushed.image_digest.removeprefix("sha256:")
        stored = tmp_path / "registry" / "data" / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
        data = bytearray(stored.read_bytes())
        data[len(data) // 2] ^= 0xFF
        stored.write_bytes(bytes(data))
        out = tmp_path / "pulled" / "small.sif"
        proc = fabric_bench(
            "image", "pull", pushed.reference, "--out", str(out), "--expect-digest", pushed.image_digest, timeout=300
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"apptainer pull of {pushed.reference} failed" in proc.stderr and "Traceback" not in proc.stderr
        assert f'want "{pushed.image_digest}"' in proc.stderr, proc.stderr  # ORAS checks the layer's digest
        assert not out.exists() and not out.with_name("small.sif.partial").exists()
