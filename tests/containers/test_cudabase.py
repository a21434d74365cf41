"""The local CUDA base's parts: link stubs from headers, the rehearsal wget, canonical
tarballs from Debian's, and a broken base stopping the build at once."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from containers import build, cudabase, sources
from tests.conftest import need

HEADER = """
typedef int CUresult;
#define CUDAAPI
#define cuCtxCreate cuCtxCreate_v4
CUresult CUDAAPI cuInit(unsigned int flags);
CUresult CUDAAPI cuCtxCreate(void **ctx, void *params, unsigned int flags, int dev);
int helper(void);
"""


def test_stub_symbols_are_every_declared_function_under_both_names(tmp_path):
    need(shutil.which("cc") is not None, "a C compiler (the stubs are compiled with cc)")
    header = tmp_path / "cuda.h"
    header.write_text(HEADER)
    assert cudabase.stub_symbols(header) == ["cuCtxCreate", "cuCtxCreate_v4", "cuInit"]


def test_link_stub_links_and_answers_stub_library(tmp_path):
    need(shutil.which("cc") is not None, "a C compiler")
    include, stubs = tmp_path / "include", tmp_path / "stubs"
    include.mkdir(), stubs.mkdir()
    many = "".join(f"CUresult CUDAAPI cuF{i}(void);\n" for i in range(60))
    (include / "cuda.h").write_text(HEADER + many)
    (include / "nvml.h").write_text(
        "typedef int nvmlReturn_t;\n#define DECLDIR\n"
        + "".join(f"nvmlReturn_t DECLDIR nvmlG{i}(void);\n" for i in range(60))
    )
    cudabase._link_stubs(include, stubs, tmp_path / "log")
    readelf = subprocess.run(["readelf", "-d", str(stubs / "libcuda.so")], capture_output=True, text=True)
    assert "Library soname: [libcuda.so.1]" in readelf.stdout
    # a program links against the stub and, at run time, the stub says what it is
    program = tmp_path / "p.c"
    program.write_text("int cuInit(unsigned);\nint main(void) { return cuInit(0); }\n")
    subprocess.run(["cc", "-o", str(tmp_path / "p"), str(program), f"-L{stubs}", "-lcuda"], check=True)
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "p")], capture_output=True, text=True).stdout
    assert "Shared library: [libcuda.so.1]" in needed  # the host driver's name, found at run time
    # the stubs folder can never stand in for the driver: it has no libcuda.so.1
    alone = subprocess.run([str(tmp_path / "p")], env={"LD_LIBRARY_PATH": str(stubs)}, capture_output=True, text=True)
    assert alone.returncode == 127 and "libcuda.so.1" in alone.stderr
    driver = tmp_path / "driver"  # where a host's driver would put libcuda.so.1
    driver.mkdir()
    shutil.copy(stubs / "libcuda.so", driver / "libcuda.so.1")
    done = subprocess.run([str(tmp_path / "p")], env={"LD_LIBRARY_PATH": str(driver)})
    assert done.returncode == cudabase.STUB_ERROR  # CUDA_ERROR_STUB_LIBRARY


def shim(tmp_path: Path) -> tuple[Path, Path]:
    """The rehearsal wget with its folder moved under tmp_path."""
    root = tmp_path / "rehearsal"
    (root / "sources").mkdir(parents=True)
    script = tmp_path / "wget"
    script.write_text(cudabase.WGET.replace(cudabase.REHEARSAL, str(root)))
    script.chmod(0o755)
    return script, root / "sources"


def test_rehearsal_wget_serves_verified_sources_and_refuses_the_rest(tmp_path):
    wget, folder = shim(tmp_path)
    (folder / "x-1.0.tar.gz").write_bytes(b"tarball")
    digest = hashlib.sha256(b"tarball").hexdigest()
    url = "https://github.com/o/x/archive/x-1.0.tar.gz"
    (folder / "urls.tsv").write_text(f"{url}\tx-1.0.tar.gz\t{digest}\n")
    out = tmp_path / "var"
    out.mkdir()
    done = subprocess.run([str(wget), "-q", "-nc", "-P", str(out), url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (out / "x-1.0.tar.gz").read_bytes() == b"tarball"
    other = subprocess.run([str(wget), "-P", str(out), "https://example.org/y.tar.gz"], capture_output=True, text=True)
    assert other.returncode == 8 and "no verified source for https://example.org/y.tar.gz" in other.stderr
    (folder / "x-1.0.tar.gz").write_bytes(b"tampered")
    tampered = subprocess.run([str(wget), "-P", str(tmp_path), url], capture_output=True, text=True)
    assert tampered.returncode == 8 and not (tmp_path / "x-1.0.tar.gz").exists()


def canonical(tmp_path: Path, src: sources.Source, top: str, orig: str, files: dict[str, str]) -> Path:
    """sources._canonical of a Debian-style tarball holding `files` under `top`/."""
    tree = tmp_path / top
    tree.mkdir()
    for name, text in files.items():
        (tree / name).write_text(text)
    original = tmp_path / orig
    with tarfile.open(original, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    work = tmp_path / "work"
    work.mkdir()
    return sources._canonical(src, original, work, tmp_path / "log")


def test_canonical_tarball_gets_the_canonical_name_top_directory_and_compression(tmp_path):
    made = canonical(
        tmp_path,
        sources.source("slurm-pmi2"),
        "slurm-slurm-24-11-5-1",
        "slurm-wlm_24.11.5.orig.tar.gz",
        {"configure": "#!/bin/sh\n"},
    )
    assert made.name == "slurm-24.11.5.tar.bz2"
    with tarfile.open(made, "r:bz2") as tar:
        assert "slurm-24.11.5/configure" in tar.getnames()


def test_sources_registry_is_complete_and_checksummed():
    for name in sources.WGET_FETCHED:
        src = sources.source(name)
        assert src.rehearsal and src.rehearsal.registry in ("debian", "shared") and len(src.rehearsal.sha256) == 64
    # issue 38: GitHub-only components come from the pinned shared trees (issue 49: UCX 1.22 and
    # nccl-tests too); only the Slingshot plugin's libfabric 1.20 has no reachable source
    assert {s.component for s in sources.SOURCES if s.rehearsal and s.rehearsal.registry == "shared"} == {
        "gdrcopy",
        "aws-ofi-nccl",
        "ucx",
        "nccl-tests",
    }
    assert sources.omitted() == ("libfabric-shs",)
    # every re-pin says why
    assert all(s.note for s in sources.SOURCES)


def test_a_base_without_the_toolkit_stops_the_build_in_one_line(tmp_path, monkeypatch):
    need(shutil.which("apptainer") is not None, "apptainer (CI: scripts/provision-apptainer.sh)")
    need(shutil.which("debootstrap") is not None, "debootstrap (the cpu base image)")
    plain = build.base_image(tmp_path / "log")  # a Debian root: no CUDA toolkit in it
    with pytest.raises(build.BuildError, match=r"lacks the CUDA toolkit layout .*; log: "):
        cudabase.check_layout(plain, tmp_path / "log")


def test_debian_patch_series_is_applied_before_the_canonical_tarball_is_made(tmp_path):
    """A Debian tarball cut from git that does not build as is (PMIx 4.2.2) gets Debian's
    own patch series first."""
    need(shutil.which("patch") is not None, "patch (applies Debian's series)")
    packaging = tmp_path / "debian" / "patches"
    packaging.mkdir(parents=True)
    (packaging / "series").write_text("fix.patch\n")
    (packaging / "fix.patch").write_text("--- a/a.c\n+++ b/a.c\n@@ -1 +1,2 @@\n int a;\n+int b;\n")
    debian = tmp_path / "x_1.0-1.debian.tar.xz"
    with tarfile.open(debian, "w:xz") as tar:
        tar.add(tmp_path / "debian", arcname="debian")
    src = sources.Source(
        "x",
        "1.0",
        "https://example.org/x-1.0.tar.bz2",
        sources.Rehearsal("debian", "bookworm", "x", "x_1.0.orig.tar.gz", "", debian=(debian.name, "")),
    )
    made = canonical(tmp_path, src, "x-1.0", "x_1.0.orig.tar.gz", {"a.c": "int a;\n"})
    with tarfile.open(made, "r:bz2") as tar:
        assert tar.extractfile("x-1.0/a.c").read() == b"int a;\nint b;\n"


def test_a_shared_source_is_taken_only_with_its_pinned_checksum(tmp_path, monkeypatch):
    """The shared trees are checked like the Debian tarballs: the copy a rehearsal builds is the
    pinned one, or nothing (one line naming the component)."""
    tree = tmp_path / "tree" / "gdrcopy-2.4.4"
    tree.mkdir(parents=True)
    (tree / "Makefile").write_text("lib:\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    good = shared / "gdrcopy-2.4.4.git.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(tree, arcname="gdrcopy-2.4.4")
    src = sources.source("gdrcopy")
    pinned = dataclasses.replace(src, rehearsal=dataclasses.replace(src.rehearsal, sha256=sources.sha256(good)))
    monkeypatch.setenv(sources.SHARED_ENV, str(shared))
    original = tmp_path / "cache" / "shared" / "gdrcopy-2.4.4.git.tar.gz"
    sources.copy_shared(pinned, original, tmp_path / "log")
    assert sources.sha256(original) == sources.sha256(good)
    # served as the canonical URL's file: same top directory, so copied as is
    assert sources._canonical(pinned, original, tmp_path, tmp_path / "log").name == "v2.4.4.tar.gz"
    original.unlink()
    good.write_bytes(good.read_bytes() + b"tampered")
    with pytest.raises(sources.FetchError, match=r"^gdrcopy: .* sha256 mismatch with the pinned value"):
        sources.copy_shared(pinned, original, tmp_path / "log")
    assert not original.exists()
    good.unlink()
    with pytest.raises(sources.FetchError, match=r"gdrcopy: .* missing \(the shared sources; set "):
        sources.copy_shared(pinned, original, tmp_path / "log")
