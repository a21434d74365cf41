"""Trust over the network (issue 64): the real CLI against hostile HTTP servers on 127.0.0.1.

C-1, C-2, C-3: a registry's tag-list `Link`, an upload's `Location` and a redirect name another
host; the login never reaches it. C-4: an unsigned artifact whose archive declares 700 MiB is
refused before its archive is fetched. C-5: a pax bomb and a long-header archive are refused by
the header scan in under a second, on pull and on replay. C-6: a registry that trickles its
answer is abandoned at the deadline."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import struct
import os
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator

import pytest

from launch.errors import UsageError
from launch.provenance import archive as archives
from launch.sharing import annotations as notes
from launch.sharing import artifact
from launch.sharing.trusted_keys import signature_key
from tests.conftest import VENV_BIN, fabric_bench
from tests.sharing.conftest import site_key

SECRET = "alice:s3cret"
BASIC = "Basic " + base64.b64encode(SECRET.encode()).decode()
REPO_PATH = "/v2/site/results"
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no name, no time


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Server:
    """A real HTTP server on 127.0.0.1 that answers with `answer(handler)` and records every request."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]):
        self.seen: list[tuple[str, str, str]] = []  # (method, path, Authorization)
        self.first_unix = 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one(self) -> None:
                outer.first_unix = outer.first_unix or time.time()
                outer.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                try:
                    answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_HEAD = do_POST = do_PUT = handle_one  # noqa: N815 (http.server's names)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


@pytest.fixture
def servers() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], Server]]:
    started: list[Server] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> Server:
        started.append(Server(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def asks_for_login(handler: BaseHTTPRequestHandler) -> bool:
    """401 with a Basic challenge unless the login came along."""
    if handler.headers.get("Authorization") == BASIC:
        return False
    send(handler, 401, WWW_Authenticate='Basic realm="registry"')
    return True


def one_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    return lines[0]


def test_c1_a_tag_list_link_to_another_host_is_refused_and_gets_no_login(servers) -> None:
    elsewhere = servers(lambda h: send(h, 200, b'{"tags": []}'))

    def registry(handler: BaseHTTPRequestHandler) -> None:
        if not asks_for_login(handler):
            link = f'<http://{elsewhere.address}{REPO_PATH}/tags/list?last=a>; rel="next"'
            send(handler, 200, b'{"name": "site/results", "tags": ["a"]}', Link=link)

    there = servers(registry)
    out = fabric_bench(
        "results",
        "pull",
        f"{there.address}/site/results",
        "--list",
        env={**os.environ, "FABRIC_BENCH_REGISTRY_AUTH": SECRET},
    )
    line = one_line(out)
    assert f"the tag list's Link points to http://{elsewhere.address}" in line and line.endswith("own host)")
    assert BASIC in [auth for _, _, auth in there.seen]  # the login went to the registry named ...
    assert elsewhere.seen == []  # ... and nothing at all to the host its Link names


def test_c2_an_upload_location_on_another_host_is_refused_before_any_blob_goes(servers, tmp_path: Path) -> None:
    elsewhere = servers(lambda h: send(h, 201))

    def registry(handler: BaseHTTPRequestHandler) -> None:
        if asks_for_login(handler):
            return
        if handler.command == "HEAD":
            send(handler, 404)
        else:  # POST .../blobs/uploads/
            send(handler, 202, Location=f"https://{elsewhere.address}/upload/1")

    there = servers(registry)
    key, _ = site_key(tmp_path, "site-a")
    archive = signed_archive(tmp_path / "a.tar.gz", key)
    out = fabric_bench(
        "publish",
        str(archive),
        f"{there.address}/site/results",
        env={**os.environ, "FABRIC_BENCH_REGISTRY_AUTH": SECRET},
    )
    assert f"the upload's Location points to https://{elsewhere.address}/upload/1" in one_line(out)
    assert elsewhere.seen == [] and not any(method == "PUT" for method, _, _ in there.seen)


def test_c3_an_image_manifest_redirect_to_another_host_carries_no_login(servers, tmp_path: Path) -> None:
    elsewhere = servers(lambda h: send(h, 404))
    digest = "sha256:" + "a" * 64

    def registry(handler: BaseHTTPRequestHandler) -> None:
        send(handler, 307, Location=f"http://{elsewhere.address}/manifests/{digest}")

    there = servers(registry)
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps({"auths": {there.address: {"auth": BASIC.removeprefix("Basic ")}}}))
    env = {**os.environ, "REGISTRY_AUTH_FILE": str(auth_file), "HOME": str(tmp_path)}
    image = f"{there.address}/fb/image@{digest}"
    out = fabric_bench("image", "pull", image, "--runtime", "podman", "--expect-digest", digest, env=env)
    assert "answered 404" in one_line(out)
    assert [auth for _, _, auth in there.seen] == [BASIC]  # the registry got its own login ...
    assert [auth for _, _, auth in elsewhere.seen] == [""]  # ... the host it redirected to got none


def signed_archive(path: Path, key: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A small signed archive of one result and a system description (site-a)."""
    from tests.security.conftest import hostile_result

    members = {
        "results/r1/result.json": json.dumps(hostile_result()).encode(),
        "systems/site-a.json": b'{"system_name": "site-a"}\n',
        **(extra or {}),
    }
    archives.write(members, path, key)
    return path


def pax_bomb(path: Path, declared_mib: int) -> Path:
    """A tar.gz (~0.7 MB for 700 MiB) whose first header is a pax header declaring
    `declared_mib` MiB, and that many MiB of zeros after it. The deflate stream is flushed
    whole after each MiB, so one MiB's compressed bytes repeat (no 700 MiB compressed here)."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, declared_mib << 20
    block = header.tobuf(tarfile.USTAR_FORMAT)
    deflate, zeros = zlib.compressobj(9, zlib.DEFLATED, -15), bytes(1 << 20)
    head = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    one_mib = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(block)
    for _ in range(declared_mib):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, (len(block) + (declared_mib << 20)) & 0xFFFFFFFF)
    path.write_bytes(GZIP_HEADER + head + one_mib * declared_mib + deflate.flush() + trailer)
    return path


def long_header(path: Path, digits: int = 150_000) -> Path:
    """A ~1 KB tar.gz whose pax header holds one record with a length field of `digits` digits
    (CVE-2024-6232's quadratic parse)."""
    record = b"9" * digits + b" path=x\n"
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, len(record)
    data = header.tobuf(tarfile.USTAR_FORMAT) + record + bytes(-len(record) % 512) + bytes(1024)
    path.write_bytes(gzip.compress(data, 9))
    return path


@pytest.mark.parametrize(
    "make",
    [lambda p: pax_bomb(p, 700), long_header, lambda p: long_header(p, 10_000)],
    ids=["pax-bomb", "long-header", "long-record-within-the-header-cap"],
)
def test_c5_hostile_tar_headers_are_refused_in_under_a_second_with_bounded_memory(tmp_path: Path, make) -> None:
    made = make(tmp_path / "hostile.tar.gz")
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(UsageError, match="pax record|pax or long-name header declares"):
        archives.read(made)
    took, (_, peak) = time.perf_counter() - started, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert took < 1.0 and peak < 16 << 20, (took, peak)


def test_c5_replay_dry_run_refuses_a_long_header_archive_in_one_line(tmp_path: Path) -> None:
    out = fabric_bench("replay", str(long_header(tmp_path / "long.tar.gz")), "--dry-run")
    assert "a pax or long-name header declares 150008 bytes, over 16384: refused" in one_line(out)


def results_artifact(archive: tuple[str, int], signed: bytes | None, annotations: dict[str, str]) -> bytes:
    layers = [{"mediaType": artifact.ARCHIVE_TYPE, "digest": archive[0], "size": archive[1]}]
    if signed is not None:
        layers.append({"mediaType": artifact.SIGNED_TYPE, "digest": sha(signed), "size": len(signed)})
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": artifact.MANIFEST_MEDIA_TYPE,
            "artifactType": artifact.ARTIFACT_TYPE,
            "config": artifact.EMPTY.descriptor(),
            "layers": layers,
            "annotations": annotations,
        }
    ).encode()


def serving(blobs: dict[str, bytes], manifest: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        name = handler.path.rsplit("/", 1)[-1]
        if "/manifests/" in handler.path:
            send(handler, 200, manifest, Content_Type=artifact.MANIFEST_MEDIA_TYPE)
        elif name in blobs:
            send(handler, 200, blobs[name])
        else:
            send(handler, 404)

    return answer


# Runs argv and prints its peak RSS (KiB) last on stderr: measured by wait4 in this small parent,
# since a child of the test process would count the test process's own pages it was forked with
PEAK_RSS = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "print(usage.ru_maxrss, file=sys.stderr)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def pull_measured(address: str, digest: str, allowed: Path, store: Path) -> tuple[subprocess.CompletedProcess, int]:
    """`results pull` by digest, and the peak RSS (KiB) of that process alone."""
    env = {**os.environ, "FABRIC_BENCH_STORE": str(store / "results.sqlite")}
    argv = [str(VENV_BIN / "fabric-bench"), "results", "pull", f"{address}/site/results@{digest}"]
    out = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *argv, "--allowed-signers", str(allowed)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    said, _, peak = out.stderr.rstrip("\n").rpartition("\n")
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout, said + "\n"), int(peak)


@pytest.fixture
def honest(tmp_path: Path) -> tuple[archives.Archive, dict[str, str], Path]:
    """site-a's small signed archive, the annotations `publish` gives it, and an allowed-signers file."""
    key, line = site_key(tmp_path, "site-a")
    (allowed := tmp_path / "allowed").write_text(line + "\n")
    read = archives.read(signed_archive(tmp_path / "a.tar.gz", key))
    return read, notes.of_archive(read, signature_key(read.signature or b"", "a")), allowed


def test_c4_an_unsigned_artifact_declaring_700_mib_is_refused_before_its_archive_is_fetched(
    servers, tmp_path: Path, honest
) -> None:
    _, annotations, allowed = honest
    bomb = pax_bomb(tmp_path / "bomb.tar.gz", 700).read_bytes()
    assert len(bomb) < 1 << 20  # 0.7 MB on the wire
    manifest = results_artifact((sha(bomb), len(bomb)), None, annotations)
    there = servers(serving({sha(bomb): bomb}, manifest))
    out, rss_kib = pull_measured(there.address, sha(manifest), allowed, tmp_path)
    finished = time.time()
    assert "carries no signed manifest" in one_line(out)
    assert not any("/blobs/" in path for _, path, _ in there.seen)  # the archive never fetched
    assert finished - there.first_unix < 1.0 and rss_kib < 100 * 1024, (finished - there.first_unix, rss_kib)


def test_c4_a_trusted_signer_s_pax_bomb_is_refused_by_the_header_scan(servers, tmp_path: Path, honest) -> None:
    """The signed manifest verifies (the signer is trusted, its key stolen): the archive beside
    it is still read within what the manifest lists, its headers scanned first."""
    read, annotations, allowed = honest
    signed = artifact.signed_manifest(read.manifest_bytes, read.signature or b"")
    bomb = pax_bomb(tmp_path / "bomb.tar.gz", 700).read_bytes()
    manifest = results_artifact((sha(bomb), len(bomb)), signed, annotations)
    there = servers(serving({sha(bomb): bomb, sha(signed): signed}, manifest))
    out, rss_kib = pull_measured(there.address, sha(manifest), allowed, tmp_path)
    finished = time.time()
    assert "a pax or long-name header declares 734003200 bytes" in one_line(out)
    assert finished - there.first_unix < 1.0 and rss_kib < 100 * 1024, (finished - there.first_unix, rss_kib)
    assert not any((tmp_path / "pulled").glob("*/pulled.json"))


def test_c6_a_registry_that_trickles_its_answer_is_abandoned_at_the_deadline(servers) -> None:
    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(60):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.5)

    there = servers(trickle)
    started = time.monotonic()
    env = {**os.environ, "FABRIC_BENCH_REGISTRY_DEADLINE_S": "2"}
    out = fabric_bench("results", "pull", f"{there.address}/site/results", "--list", env=env)
    assert "no whole answer within 2 s: abandoned" in one_line(out)
    assert time.monotonic() - started < 2 + 6  # the deadline, plus the command's own start


def test_c6_a_deadline_that_is_not_seconds_is_one_line() -> None:
    env = {**os.environ, "FABRIC_BENCH_REGISTRY_DEADLINE_S": "1e400"}
    out = fabric_bench("results", "pull", "127.0.0.1:1/site/results", "--list", env=env)
    assert "FABRIC_BENCH_REGISTRY_DEADLINE_S" in one_line(out)
