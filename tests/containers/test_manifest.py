"""Content manifests: path, type, mode and sha256 (no times); the identical share of two trees and
the differing paths grouped by cause."""

from __future__ import annotations

import json
import os

import pytest

from containers import manifest


def _tree(root, build_date: str, pyc: bytes):
    (root / ".singularity.d").mkdir(parents=True)
    (root / ".singularity.d" / "labels.json").write_text(
        json.dumps({"org.fabric-bench.flavour": "cpu-debian", "org.label-schema.build-date": build_date})
    )
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/libucx.so.0").write_bytes(b"\x7fELF ucx")
    (root / "usr/lib/libucx.so").symlink_to("libucx.so.0")
    (root / "opt/venv/__pycache__").mkdir(parents=True)
    (root / "opt/venv/__pycache__/mod.cpython-311.pyc").write_bytes(pyc)
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/dpkg.log").write_text(f"{build_date} install ucx\n")


def test_times_are_left_out_and_causes_are_named(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _tree(a, "Thursday_3_December_2026_13:54:24_UTC", b"pyc-1")
    _tree(b, "Thursday_3_December_2026_16:19:16_UTC", b"pyc-2")
    os.utime(b / "usr/lib/libucx.so.0", (0, 0))  # an mtime alone changes nothing
    first, second = manifest.of_tree(a), manifest.of_tree(b)
    assert first["/usr/lib/libucx.so"] == "link 0777 libucx.so.0"
    assert first["/usr/lib/libucx.so.0"].startswith("file 0644 ")
    assert first["/.singularity.d/labels.json"] == second["/.singularity.d/labels.json"]
    result = manifest.compare(first, second)
    assert result.total == len(first) and result.identical == len(first) - 2
    assert result.differing == {
        "byte-compiled Python (.pyc: source mtimes, hash-seeded marshal order)": [
            "/opt/venv/__pycache__/mod.cpython-311.pyc"
        ],
        "package-manager logs and caches (dates)": ["/var/log/dpkg.log"],
    }
    assert result.lines()[0] == f"identical: {len(first) - 2} of {len(first)} entries ({100 * result.share:.2f} %)"


def test_a_mode_or_a_missing_file_differs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _tree(a, "d", b"p")
    _tree(b, "d", b"p")
    os.chmod(b / "usr/lib/libucx.so.0", 0o755)
    (b / "usr/lib/extra").write_text("x")
    result = manifest.compare(manifest.of_tree(a), manifest.of_tree(b))
    assert result.differing == {"other": ["/usr/lib/extra", "/usr/lib/libucx.so.0"]}


@pytest.mark.slow
def test_two_builds_of_a_small_sif_have_one_content_manifest(tmp_path):
    """Two `apptainer build`s of one tree a second apart: their SIF digests differ (times), their
    content manifests do not; `image verify --against` says 100 %."""
    import shutil
    import subprocess
    import time

    from tests.conftest import fabric_bench, need

    need(shutil.which("apptainer") is not None, "apptainer not installed (scripts/provision-apptainer.sh)")
    need(shutil.which("unsquashfs") is not None, "squashfs-tools not installed")
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("fabric-bench\n")
    sifs = []
    for name in ("one.sif", "two.sif"):
        subprocess.run(
            ["apptainer", "build", "--force", str(tmp_path / name), str(tree)], check=True, capture_output=True
        )
        sifs.append(tmp_path / name)
        time.sleep(1.1)
    assert sifs[0].read_bytes() != sifs[1].read_bytes()
    assert manifest.of_sif(sifs[0]) == manifest.of_sif(sifs[1])
    out = fabric_bench("image", "verify", str(sifs[0]), "--against", str(sifs[1]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].endswith("(100.00 %)")
