"""What describes an image at another site is data to check: a reference file, an SBOM and a
content manifest that are malformed, huge, nested 100k deep, not a file at all (a FIFO,
/dev/zero), or name paths outside an image are refused in one line (exit 2 on the command
line) before anything is pulled or written, in bounded time and memory (issue 41)."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from containers import manifest, sbom
from containers.host import BuildError
from containers.untrusted import MAX_DEPTH, UntrustedInput, depth, load_json, read_file
from launch.provenance import images
from tests.conftest import fabric_bench
from tests.security.conftest import hostile_result, write_archive

DIGEST = "sha256:" + "a" * 64
REFERENCE = f"127.0.0.1:5000/fb/stack@{DIGEST}"
BOMB = "[" * 100_000 + "]" * 100_000


def entry(**changes) -> dict:
    return {"reference": REFERENCE, "runtime": "apptainer", "image_digest": DIGEST, "labels": {}, "sbom": "", **changes}


def references(**changes) -> str:
    return json.dumps({"schema": images.SCHEMA, "images": [entry(**changes)]})


# ---------------------------------------------------------------- the bounded reader itself


def test_nesting_is_measured_without_recursion_and_a_bomb_is_one_line():
    assert depth(json.loads("[" * 900 + "]" * 900), 10_000) == 900  # walked without recursion
    assert depth({"a": [1, {"b": []}]}) == 4 and depth(7) == 0
    for text in (BOMB, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), '{"a":' * 5000 + "1" + "}" * 5000):
        with pytest.raises(UntrustedInput, match=f"nested more than {MAX_DEPTH} levels deep"):
            load_json(text, "x", 2**20)
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x", 2**20) is not None


def test_a_file_is_read_no_further_than_its_limit(tmp_path):
    big = tmp_path / "big"
    with big.open("wb") as f:  # 1 GiB, sparse: reading it all would show in memory
        f.truncate(2**30)
    tracemalloc.start()
    try:
        with pytest.raises(UntrustedInput, match="larger than 1 MiB"):
            read_file(big, 2**20, "thing")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_what_is_not_a_regular_file_is_not_read(tmp_path, kind):
    path = {"fifo": tmp_path / "fifo", "device": Path("/dev/zero"), "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a plain open would block for ever
    started = time.monotonic()
    with pytest.raises(UntrustedInput, match="not a regular file"):
        read_file(path, 2**20, "thing")
    assert time.monotonic() - started < 1


# ---------------------------------------------------------------- reference files


@pytest.mark.parametrize(
    "body, line",
    [
        (BOMB, "is nested more than 64 levels deep"),
        ("{" * 3, "is not JSON"),
        (" " * (images.MAX_BYTES + 1), f"is larger than {images.MAX_BYTES // 2**20} MiB"),
        (references(reference="127.0.0.1:5000/fb/stack:latest"), "entry 0 is malformed"),  # not pinned
        (references(reference="-oProxyCommand=touch@x/y"), "entry 0 is malformed"),
        (references(reference=["127.0.0.1:5000/fb/stack"]), "entry 0 is malformed"),
        (references(labels={"org.fabric-bench.fabric": {"nested": "x"}}), "entry 0 is malformed"),
        (references(runtime="sh -c 'touch /tmp/x'"), "entry 0 is malformed"),
        (references(image_digest="sha256:../../etc/passwd"), "entry 0 is malformed"),
        (json.dumps({"schema": images.SCHEMA, "images": {"a": 1}}), "expected {'schema'"),
    ],
)
def test_a_hostile_reference_file_stops_image_pull_before_anything_is_pulled(tmp_path, body, line):
    refs = tmp_path / "images.json"
    refs.write_text(body)
    out = tmp_path / "pulled" / "stack.sif"
    proc = fabric_bench("image", "pull", REFERENCE, "--out", str(out), "--reference-file", str(refs))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert line in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "pulled").exists()


@pytest.mark.parametrize("kind", ["fifo", "device", "signature"])
def test_a_reference_file_that_is_no_file_or_has_a_huge_signature_is_refused_at_once(tmp_path, kind):
    refs = tmp_path / "images.json"
    if kind == "fifo":
        os.mkfifo(refs)
    elif kind == "device":
        refs = Path("/dev/zero")
    else:
        refs.write_text(references())
        Path(f"{refs}.sig").write_bytes(b"x" * (images.MAX_SIGNATURE_BYTES + 1))
    proc = fabric_bench(
        "image", "pull", REFERENCE, "--out", str(tmp_path / "x.sif"), "--reference-file", str(refs), timeout=60
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert ("not a regular file" if kind != "signature" else "larger than 64 KiB") in proc.stderr, proc.stderr


# ---------------------------------------------------------------- SBOMs


@pytest.mark.parametrize(
    "text, line",
    [
        (BOMB, "nested more than 64 levels deep"),
        (json.dumps({"bomFormat": "CycloneDX", "metadata": [1]}), "metadata is not an object"),
        (json.dumps({"bomFormat": "CycloneDX", "metadata": {"component": "x"}}), "metadata.component is not an object"),
        (json.dumps({"bomFormat": "CycloneDX", "components": 7}), "components is not a list"),
        (
            json.dumps({"bomFormat": "CycloneDX", "components": [{"name": "ucx", "properties": 3}]}),
            "properties is not a list",
        ),
        (
            json.dumps({"bomFormat": "CycloneDX", "components": [{"name": "ucx", "version": {"a": [1]}}]}),
            "where a name or a version belongs",
        ),
        (
            json.dumps(
                {
                    "bomFormat": "CycloneDX",
                    "metadata": {"component": {"properties": [{"name": "fabric-bench:compiler", "value": ["gcc"]}]}},
                }
            ),
            "where a name or a version belongs",
        ),
    ],
)
def test_a_strangers_sbom_of_the_wrong_shape_is_one_line(text, line):
    with pytest.raises(sbom.SbomError, match=line):
        sbom.read(text)


def test_compare_says_an_archives_hostile_sbom_is_refused_and_goes_on(tmp_path):
    """An SBOM nested 100k deep in an archive made `compare` end in a RecursionError traceback."""
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()], **{"stack/sbom.cdx.json": BOMB.encode()})
    proc = fabric_bench("compare", str(archive), str(archive))
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), proc.stderr
    assert "its SBOM is refused: SBOM is nested more than 64 levels deep" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- content manifests


def saved(tmp_path: Path, data, name: str = "other.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_manifest_saved_by_save_loads_back_and_compares(tmp_path):
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("fabric-bench\n")
    (tree / "lib").symlink_to("../etc")
    first = manifest.of_tree(tree)
    manifest.save(first, tmp_path / "first.json")
    assert manifest.load(tmp_path / "first.json") == first
    assert manifest.compare(first, manifest.load(tmp_path / "first.json")).share == 1.0


@pytest.mark.parametrize(
    "data, line",
    [
        ({"../../etc/passwd": "dir 0755"}, "is not a path inside an image"),
        ({"/etc/../../root": "dir 0755"}, "is not a path inside an image"),
        ({"/etc//x": "dir 0755"}, "is not a path inside an image"),
        ({"/etc/x\x1b[2J": "dir 0755"}, "is not a path inside an image"),  # a terminal escape, printed later
        ({"relative/path": "dir 0755"}, "is not a path inside an image"),
        ({"/etc/x": "file 0644 not-a-digest"}, "is not 'file|dir|link|special"),
        ({"/etc/x": "link 0777 \n/evil"}, "is not 'file|dir|link|special"),
        ({"/etc/x": {"nested": "dir 0755"}}, "nested more than 1 level deep"),
        (["/etc/x", "dir 0755"], "not an object of path -> entry"),
        (BOMB, "nested more than 1 level deep"),
        ("not json", "is not JSON"),
    ],
)
def test_a_hostile_content_manifest_is_one_line(tmp_path, data, line):
    with pytest.raises(BuildError, match=line.replace("|", r"\|")):
        manifest.load(saved(tmp_path, data))


def test_a_manifest_of_a_million_entries_is_refused_within_bounded_memory(tmp_path):
    path = tmp_path / "million.json"
    with path.open("w") as f:  # short paths: under the byte limit, over the entry limit
        f.write("{" + ",".join(f'"/{i:x}":"dir 0755"' for i in range(10**6)) + "}")
    assert path.stat().st_size < manifest.MAX_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(BuildError, match=f"1000000 entries, over the {manifest.MAX_ENTRIES} limit"):
            manifest.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 400 * 2**20, peak
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(manifest.MAX_BYTES + 1)
    with pytest.raises(BuildError, match="larger than 64 MiB"):
        manifest.load(huge)


def test_image_verify_refuses_another_sites_hostile_manifest_before_unpacking_anything(tmp_path):
    other = saved(tmp_path, {"/../../etc/shadow": "dir 0755"})
    image = tmp_path / "stack.sif"
    image.write_bytes(b"not opened")
    proc = fabric_bench("image", "verify", str(image), "--against", str(other), "--save", str(tmp_path / "saved"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is not a path inside an image" in proc.stderr and not (tmp_path / "saved").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "stack.sif"]  # no scratch left


def test_a_sif_that_unpacks_to_more_than_the_limits_is_refused_before_unpacking(tmp_path):
    """A SIF of a few KiB can carry a huge sparse file (hashed byte by byte once unpacked) or a
    flood of entries: `unsquashfs -lls` is counted first, and nothing is unpacked past a limit."""
    import shutil
    import subprocess

    from tests.conftest import need

    need(shutil.which("apptainer") is not None and shutil.which("unsquashfs") is not None, "apptainer, unsquashfs")
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    with (tree / "etc" / "sparse").open("wb") as f:
        f.truncate(3 * 2**20)
    sif = tmp_path / "small.sif"
    subprocess.run(["apptainer", "build", "--force", str(sif), str(tree)], check=True, capture_output=True, timeout=300)
    assert sif.stat().st_size < 2**20 and "/etc/sparse" in manifest.of_sif(sif, scratch=tmp_path)
    for limits, line in (
        (manifest.UnpackLimits(file_bytes=2**20), "more than 1048576 bytes of files"),
        (manifest.UnpackLimits(entries=5), "more than 5 entries"),
    ):
        with pytest.raises(BuildError, match=f"unpacks to {line}; refused"):
            manifest.of_sif(sif, scratch=tmp_path, limits=limits)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.sif", "tree"]  # no scratch left behind
