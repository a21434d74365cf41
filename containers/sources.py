"""Where every source-built component of the cuda flavour comes from.

Two places per component:

- `site_url`: the canonical upstream URL. The rendered site recipe keeps it
  (hpccm's building blocks `wget` it at the site).
- `rehearsal`: a source this machine can reach (the configured Debian mirror's
  source packages, PyPI), verified by its published checksum: for Debian, the
  sha256 in the suite's signed Sources index (InRelease -> Sources ->
  Checksums-Sha256; `apt-get source` checks it, and `fetch()` checks it again
  against the value pinned here); for PyPI, the sha256 PyPI publishes (pip
  checks it; pinned here too).

`fetch()` puts, for every reachable component, a tarball under
CACHE/sources/ named and laid out as the canonical URL's file (same basename,
compression and top-level directory; a Debian tarball cut from git gets the
`configure` its upstream release tarball carries, by the upstream's own
autogen script), and writes CACHE/sources/urls.tsv (canonical URL -> file,
sha256). The local rehearsal base's `wget` serves those URLs from that folder
(containers/cudabase.py), so a rehearsal builds the site recipe unchanged.

Re-pins (the version built differs from what the stack pinned before) are
named in `note`. Components no registry here carries (GitHub-only: gdrcopy,
aws-ofi-nccl, UCX 1.22, nccl-tests) come from the pinned upstream trees in the project's shared sources
folder (`shared_dir()`: ../shared/sources, or FABRIC_BENCH_SHARED_SOURCES), checked
against the sha256 pinned here (the folder's SOURCE.md: `git archive` of the release
tag); a git tree without `configure` gets it from its own autogen script, as its
release tarball does. A component with no source at all is `UNREACHABLE`: a
rehearsal leaves it out (`omitted()`), and its record says so.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Literal, Optional

Progress = Callable[[str], None]
REHEARSAL = "/fabric-bench-rehearsal"  # bind targets inside a base that builds from source

# The rehearsal's wget, in every base whose builds fetch sources (the local CUDA devel base,
# the cpu base): hpccm's blocks `wget` each canonical URL; this one serves it from the
# verified folder bound at REHEARSAL/sources and refuses any other URL.
WGET = f"""#!/bin/sh
# fabric-bench rehearsal wget: serves the canonical source URLs hpccm's blocks fetch
# from the verified folder bound at {REHEARSAL}/sources (urls.tsv: url file sha256).
dir=. out= url=
while [ $# -gt 0 ]; do
  case $1 in -P) dir=$2; shift ;; -O) out=$2; shift ;; -*) ;; *) url=$1 ;; esac
  shift
done
table={REHEARSAL}/sources/urls.tsv
[ -r "$table" ] || {{ echo "rehearsal wget: $table missing (sources not bound)" >&2; exit 8; }}
line=$(awk -F '\\t' -v u="$url" '$1 == u {{print $2 " " $3}}' "$table")
[ -n "$line" ] || {{ echo "rehearsal wget: no verified source for $url" >&2; exit 8; }}
set -- $line
echo "$2  {REHEARSAL}/sources/$1" | sha256sum -c --quiet - || exit 8
cp "{REHEARSAL}/sources/$1" "${{out:-$dir/$1}}"
echo "rehearsal wget: $url <- $1 (sha256 $2)"
"""


def install_wget(tree: Path) -> None:
    """The rehearsal's wget into a root filesystem (before /usr/bin on PATH), with the
    mount point of the sources folder it serves."""
    wget = tree / "usr/local/bin/wget"
    wget.parent.mkdir(parents=True, exist_ok=True)
    wget.write_text(WGET)
    wget.chmod(0o755)
    (tree / REHEARSAL.lstrip("/") / "sources").mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class Rehearsal:
    """A reachable, checksummed copy of a component's source."""

    registry: str  # "debian" | "pypi" | "shared" (the pinned upstream trees)
    suite: str  # Debian suite (or "pypi")
    package: str  # source package / PyPI project
    file: str  # file as the registry names it
    sha256: str  # published checksum of `file`
    autogen: str = ""  # command (split on spaces) run in the unpacked tree: a release-like tarball
    top: str = ""  # top-level directory inside the archive, when it differs
    drop_lines: tuple[str, str] = ("", "")  # (file, substring): lines removed before autogen
    # Debian's packaging (file, sha256): its debian/patches series is applied before autogen,
    # where the tarball does not build without it
    debian: tuple[str, str] = ("", "")


@dataclass(frozen=True)
class Source:
    component: str
    version: str
    site_url: str
    rehearsal: Optional[Rehearsal]
    note: str = ""

    @property
    def basename(self) -> str:
        return self.site_url.rsplit("/", 1)[-1]


GITHUB = "https://github.com"
SOURCES: tuple[Source, ...] = (
    Source(
        "rdma-core",
        "56.1",
        f"{GITHUB}/linux-rdma/rdma-core/archive/v56.1.tar.gz",
        Rehearsal(
            "debian",
            "trixie",
            "rdma-core",
            "rdma-core_56.1.orig.tar.gz",
            "63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8",
        ),
        "re-pinned from 55.0: the mirror carries no 55.0; 56.1 (trixie) is the nearest release",
    ),
    Source(
        "ucx",
        "1.22.0",
        f"{GITHUB}/openucx/ucx/releases/download/v1.22.0/ucx-1.22.0.tar.gz",
        Rehearsal(
            "shared",
            "shared",
            "ucx",
            "ucx-1.22.0.git.tar.gz",
            "d2ae32e86c463b77997369bc62caf49dc165338075056a46fc81434abcbcb8e6",
            autogen="./autogen.sh",
        ),
        "the cuda flavour's UCX (issue 49: a CUDA-aware Open MPI wants UCX >= 1.16, with CUDA and "
        "gdrcopy): GitHub only at this release (trixie's 1.18.1+ds and sid's 1.23.0~rc1 files are "
        "absent from the mirror); the shared sources' `git archive` of tag v1.22.0 (commit "
        "8a6b06fb), its configure generated by the tree's own autogen.sh, as the release tarball "
        "carries one",
    ),
    Source(
        "ucx-cpu",
        "1.13.1",
        f"{GITHUB}/openucx/ucx/releases/download/v1.13.1/ucx-1.13.1.tar.gz",
        Rehearsal(
            "debian",
            "bookworm",
            "ucx",
            "ucx_1.13.1.orig.tar.xz",
            "1a88e09ca1b406c046a469c2ae271d2c330050b5664c0bcd9890e26c6ef09f3c",
            autogen="./autogen.sh",
            drop_lines=("configure.ac", "debian/"),
        ),
        "the cpu flavour's UCX (its image's `ucx`), re-pinned from 1.18.0: 1.13.1 (bookworm) is "
        "the only UCX a Debian source package here serves, and the release cpu-debian's packaged "
        "stack carries. Debian strips upstream's debian/ folder from the tarball, so the "
        "configure.ac lines naming debian/ files go before autogen (as Debian's own "
        "undo-upstream.patch does)",
    ),
    Source(
        "libfabric",
        "2.1.0",
        f"{GITHUB}/ofiwg/libfabric/releases/download/v2.1.0/libfabric-2.1.0.tar.bz2",
        Rehearsal(
            "debian",
            "trixie",
            "libfabric",
            "libfabric_2.1.0.orig.tar.xz",
            "1a66369772d5bb151737214af1c478993e969cf298e8f9ed369e7a2ab8d8c6df",
            autogen="./autogen.sh",
        ),
        "as pinned. The slingshot layer links the stack's libfabric users against the "
        "distribution's binary libfabric-dev instead (1.17.0: an ABI SHS 12 hosts accept; "
        "containers/recipe.py HOST_ABI_PACKAGES): bookworm's 1.17.0 source is listed, but its "
        "tarball is absent from the mirror",
    ),
    Source(
        "pmix",
        "4.2.2",
        f"{GITHUB}/openpmix/openpmix/releases/download/v4.2.2/pmix-4.2.2.tar.gz",
        Rehearsal(
            "debian",
            "bookworm",
            "pmix",
            "pmix_4.2.2.orig.tar.xz",
            "4a534a8f87220c6f0d1b4b3195820f585ffaf3ceb8e21e40460d58439b81d47b",
            autogen="./autogen.pl",
            debian=(
                "pmix_4.2.2-1+deb12u1.debian.tar.xz",
                "92a012d218f08c3e8868ec5c1d2e23f23051c7805f56dccf6d852df84569a1de",
            ),
        ),
        "re-pinned from 4.2.9: 4.2.2 (bookworm) is the only reachable 4.2.x (trixie's 5.0.7 "
        "file is absent); bookworm's own Open MPI 4.1.4 is built against it. Debian's tarball "
        "is cut from git and does not compile as is (pmix_mca_base_var.c lacks an include): "
        "Debian's own patch series (bookworm's debian.tar.xz) is applied, as Debian builds it",
    ),
    Source(
        "openmpi",
        "4.1.4",
        "https://www.open-mpi.org/software/ompi/v4.1/downloads/openmpi-4.1.4.tar.bz2",
        Rehearsal(
            "debian",
            "bookworm",
            "openmpi",
            "openmpi_4.1.4.orig.tar.xz",
            "ddaee7dbdb01eb4fab1fda5b5e03e8bbff026711806c095c1f39bb410f99f263",
        ),
        "re-pinned from 4.1.8: 4.1.4 (bookworm) is the only reachable 4.1.x (5.0.7 is a new "
        "series without --with-pmi and the openib/psm2 layout the presets name)",
    ),
    Source(
        "libpsm2",
        "11.2.185",
        f"{GITHUB}/cornelisnetworks/opa-psm2/archive/refs/tags/PSM2_11.2.185.tar.gz",
        Rehearsal(
            "debian",
            "trixie",
            "libpsm2",
            "libpsm2_11.2.185.orig.tar.gz",
            "8c0446e989feb4a3822791e4a3687060916f7c4612d1e8e493879be66f10db09",
        ),
        "re-pinned from 11.2.230: 11.2.185 is what Debian carries (the same tag's GitHub archive)",
    ),
    Source(
        "slurm-pmi2",
        "24.11.5",
        "https://download.schedmd.com/slurm/slurm-24.11.5.tar.bz2",
        Rehearsal(
            "debian",
            "trixie",
            "slurm-wlm",
            "slurm-wlm_24.11.5.orig.tar.gz",
            "e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332",
            top="slurm-slurm-24-11-5-1",
        ),
        "as pinned (Debian's tarball is the git tag slurm-24-11-5-1, configure included)",
    ),
    Source(
        "horovod",
        "0.28.1",
        "https://pypi.org/project/horovod/0.28.1/",
        Rehearsal(
            "pypi",
            "pypi",
            "horovod",
            "horovod-0.28.1.tar.gz",
            "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0",
        ),
        "the sdist from PyPI, fetched by pip inside the build as at a site",
    ),
    Source(
        "nccl",
        "2.30.7",
        "https://pypi.org/project/nvidia-nccl-cu13/2.30.7/",
        Rehearsal(
            "pypi",
            "pypi",
            "nvidia-nccl-cu13",
            "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
            "cefa7fdb9710efd0f39c5f1be1d61ff6fc9a996c451265bd7fbdcf9455ed4b50",
        ),
        "NCCL's source is on GitHub only: the image takes NVIDIA's binary NCCL 2.30.7 from the "
        "nvidia-nccl-cu13 wheel torch already depends on (one NCCL in the process), at sites "
        "too; the NCCL source build is gone from the recipe",
    ),
    Source(
        "gdrcopy",
        "2.4.4",
        f"{GITHUB}/NVIDIA/gdrcopy/archive/v2.4.4.tar.gz",
        Rehearsal(
            "shared",
            "shared",
            "gdrcopy",
            "gdrcopy-2.4.4.git.tar.gz",
            "537bd66239c1548fc4dc090d5b68cd15612ed213acd29baaf445f65eaf939172",
        ),
        "as pinned: GitHub only (no Debian source package, nothing on PyPI); the shared "
        "sources' `git archive` of tag v2.4.4 (commit 9ecf5e58), the tree GitHub's archive URL serves",
    ),
    Source(
        "aws-ofi-nccl",
        "1.17.2",
        f"{GITHUB}/aws/aws-ofi-nccl/releases/download/v1.17.2/aws-ofi-nccl-1.17.2.tar.gz",
        Rehearsal(
            "shared",
            "shared",
            "aws-ofi-nccl",
            "aws-ofi-nccl-1.17.2.git.tar.gz",
            "87547e4dbdce508d89470c73fe9eaca0e589e8fbf6c83ad285fc114d412153fe",
            autogen="sh ./autogen.sh",
        ),  # its #! is not on line 1: run by sh
        "as pinned: GitHub only; the shared sources' `git archive` of tag v1.17.2 (commit "
        "790ea4a2), its configure generated by the tree's own autogen.sh (autoreconf), as the "
        "release tarball carries one",
    ),
    Source(
        "nccl-tests",
        "2.19.6",
        f"{GITHUB}/NVIDIA/nccl-tests/archive/v2.19.6.tar.gz",
        Rehearsal(
            "shared",
            "shared",
            "nccl-tests",
            "nccl-tests-2.19.6.git.tar.gz",
            "a93c09241f55985677caa5151caaa8b1fc7cd6dfa40201e2ea1534d3326c983f",
        ),
        "as pinned: GitHub only; the shared sources' `git archive` of tag v2.19.6 (commit "
        "a0b82b22), the tree GitHub's archive URL serves (a Makefile, no configure)",
    ),
    Source(
        "libfabric-shs",
        "1.20.2",
        f"{GITHUB}/ofiwg/libfabric/releases/download/v1.20.2/libfabric-1.20.2.tar.bz2",
        None,
        "the libfabric the Slingshot layer builds aws-ofi-nccl against (headers and link ABI; "
        "never installed in the image: the host's libfabric is bound in at run time). 1.17's headers "
        "(the distribution's libfabric-dev) do not declare FI_OPT_CUDA_API_PERMITTED, and the plugin "
        "then refuses every endpoint of an HMEM-capable provider (cxi) when it asks for the 1.18 API; "
        "the stack's 2.1 would make the plugin need FABRIC_1.8, which the 1.20-1.22 of SHS 12 hosts "
        "lack. 1.20.2, the oldest of the releases current Slingshot host software ships, declares the "
        "option and links an ABI every 1.20-1.22 host provides. No source here: Debian carries only "
        "1.17.0 (bookworm, tarball absent from the mirror) and 2.1.0 (trixie, sid), mpich 4.2.1's "
        "bundled libfabric is absent from the mirror (404), PyPI has none, the shared sources have "
        "none: a rehearsal omits it and builds the plugin against the distribution's 1.17 as before",
    ),
)
BY_NAME = {s.component: s for s in SOURCES}
# Fetched by hpccm building blocks with wget (the rest come by pip or are unreachable).
WGET_FETCHED = (
    "rdma-core",
    "ucx",
    "ucx-cpu",
    "libfabric",
    "pmix",
    "openmpi",
    "libpsm2",
    "slurm-pmi2",
    "gdrcopy",
    "aws-ofi-nccl",
    "nccl-tests",
)
SHARED_ENV = "FABRIC_BENCH_SHARED_SOURCES"


def shared_dir() -> Path:
    """The pinned upstream trees no registry here carries (read-only; beside the checkout)."""
    repo = Path(__file__).resolve().parents[1]
    return Path(os.environ.get(SHARED_ENV) or repo.parent / "shared" / "sources")


def source(component: str) -> Source:
    return BY_NAME[component]


def flavour_sources(flavour: str) -> tuple[Source, ...]:
    """A flavour's sources by the names its image uses (/usr/local/<component>, labels): the cpu
    flavours' UCX is "ucx-cpu" (bookworm's 1.13.1) under the name "ucx"; cuda's is "ucx" (1.22.0)."""
    if flavour not in ("cpu", "cpu-debian"):
        return tuple(s for s in SOURCES if s.component != "ucx-cpu")
    cpu_ucx = replace(BY_NAME["ucx-cpu"], component="ucx")
    return tuple(cpu_ucx if s.component == "ucx" else s for s in SOURCES if s.component != "ucx-cpu")


def omitted() -> tuple[str, ...]:
    """Components a rehearsal here cannot build: no reachable source."""
    return tuple(s.component for s in SOURCES if s.rehearsal is None)


class FetchError(Exception):
    """One line naming the component and the log."""


def sources_dir(cache: Path) -> Path:
    return cache / "sources"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _apt_options(root: Path) -> list[str]:
    return [
        f"-o=Dir::Etc::SourceList={root / 'sources.list'}",
        "-o=Dir::Etc::SourceParts=/nonexistent",
        f"-o=Dir::State::Lists={root / 'lists'}",
        f"-o=Dir::Cache={root / 'cache'}",
        "-o=Acquire::Check-Valid-Until=false",
        "-o=APT::Sandbox::User=root",
    ]


def _apt_root(cache: Path, mirror: str, log: Path) -> Path:
    """A private apt state with deb-src lines for the suites the mirror carries."""
    root = sources_dir(cache) / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    suites = sorted({s.rehearsal.suite for s in SOURCES if s.rehearsal and s.rehearsal.registry == "debian"})
    text = "".join(f"deb-src {mirror} {suite} main\n" for suite in suites)
    if not (root / "sources.list").exists() or (root / "sources.list").read_text() != text:
        (root / "sources.list").write_text(text)
        _run(["apt-get", *_apt_options(root), "update"], log, "apt-get update (deb-src)")
    return root


def _run(argv: list[str], log: Path, what: str, cwd: Optional[Path] = None, check: bool = True) -> int:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd).returncode
    if check and code != 0:
        raise FetchError(f"{what} failed (exit {code}); log: {log}")
    return code


# tarfile.open's write mode for each compression _compression names (a Literal: mypy picks the overload)
WRITE_MODES: dict[str, Literal["w:gz", "w:bz2", "w:xz"]] = {"gz": "w:gz", "bz2": "w:bz2", "xz": "w:xz"}


def _compression(name: str) -> str:
    for suffix, mode in ((".tar.gz", "gz"), (".tgz", "gz"), (".tar.bz2", "bz2"), (".tar.xz", "xz")):
        if name.endswith(suffix):
            return mode
    raise ValueError(f"not a tarball: {name}")


def _canonical(src: Source, original: Path, work: Path, log: Path) -> Path:
    """`original` laid out as the canonical URL's file (name, compression, top dir)."""
    reh = src.rehearsal
    assert reh is not None
    out = work / src.basename
    canonical_top = _canonical_top(src)
    same_top = (reh.top or canonical_top) == canonical_top
    if not reh.autogen and same_top and _compression(reh.file) == _compression(src.basename):
        shutil.copy2(original, out)
        return out
    tree = work / "tree"
    tree.mkdir()
    with tarfile.open(original) as tar:
        tar.extractall(tree, filter="tar")
    (top,) = list(tree.iterdir())
    if top.name != canonical_top:
        top = top.rename(tree / canonical_top)
    if reh.debian[0]:
        debian = original.parent / reh.debian[0]
        with tarfile.open(debian) as tar:
            tar.extractall(work / "packaging", filter="tar")
        patches = work / "packaging" / "debian" / "patches"
        for name in (patches / "series").read_text().split():
            if not name.startswith("#"):
                _run(["patch", "-p1", "-i", str(patches / name)], log, f"{src.component}: Debian's {name}", cwd=top)
    if reh.drop_lines[0]:
        path = top / reh.drop_lines[0]
        path.write_text(
            "".join(line for line in path.read_text().splitlines(keepends=True) if reh.drop_lines[1] not in line)
        )
    if reh.autogen:
        _run(reh.autogen.split(), log, f"{src.component}: {reh.autogen}", cwd=top)
        shutil.rmtree(top / "autom4te.cache", ignore_errors=True)
    with tarfile.open(out, WRITE_MODES[_compression(src.basename)]) as tar:
        tar.add(top, arcname=canonical_top)
    return out


def _canonical_top(src: Source) -> str:
    """The directory hpccm `cd`s into after unpacking the canonical tarball."""
    if src.component == "rdma-core":
        return f"rdma-core-{src.version}"
    if src.component == "libpsm2":
        return f"opa-psm2-PSM2_{src.version}"
    if src.component == "slurm-pmi2":
        return f"slurm-{src.version}"
    if src.component in ("gdrcopy", "nccl-tests"):  # GitHub's archive of tag vX unpacks to NAME-X
        return f"{src.component}-{src.version}"
    return src.basename.rsplit(".tar", 1)[0]


def fetch(cache: Path, mirror: str, progress: Progress = print) -> Path:
    """Fetch and verify every reachable wget-fetched source into CACHE/sources;
    write urls.tsv (url, file, sha256). Returns the folder. Idempotent."""
    folder = sources_dir(cache)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "fetch.log"
    table = []
    apt_root: Optional[Path] = None
    for name in WGET_FETCHED:
        src = BY_NAME[name]
        reh = src.rehearsal
        assert reh is not None and reh.registry in ("debian", "shared")
        served = folder / "served" / src.basename
        original = folder / reh.registry / reh.file
        if reh.registry == "shared":  # checked against its pin as it is copied
            copy_shared(src, original, log)
        elif not (original.exists() and sha256(original) == reh.sha256):
            apt_root = apt_root or _apt_root(cache, mirror, log)
            progress(f"sources: apt-get source {reh.package} ({reh.suite}: {reh.file})")
            original.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as work:
                # the mirror lacks some .dsc files: apt then exits 100 after fetching the
                # tarball, which it has checked against the signed Sources index all the same
                _run(
                    ["apt-get", *_apt_options(apt_root), "source", "--download-only", f"{reh.package}/{reh.suite}"],
                    log,
                    f"{name}: apt-get source",
                    cwd=Path(work),
                    check=False,
                )
                got = Path(work) / reh.file
                if not got.exists():
                    raise FetchError(f"{name}: {reh.file} not fetched from {reh.suite}; log: {log}")
                shutil.move(str(got), original)
        if reh.registry == "debian" and sha256(original) != reh.sha256:
            original.unlink()
            raise FetchError(f"{name}: {reh.file} sha256 mismatch with the Sources index; log: {log}")
        if reh.debian[0]:
            _fetch_debian_file(reh, reh.debian, original.parent, apt_root or _apt_root(cache, mirror, log), log)
        if not served.exists():
            progress(f"sources: {name} -> {src.basename}")
            served.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as work:
                made = _canonical(src, original, Path(work), log)
                partial = served.with_name(served.name + ".partial")
                shutil.move(str(made), partial)
                partial.rename(served)
        table.append(f"{src.site_url}\t{served.name}\t{sha256(served)}\t{reh.file}\t{reh.sha256}\n")
    (folder / "served" / "urls.tsv").write_text("".join(table))
    return folder / "served"


def copy_shared(src: Source, original: Path, log: Path) -> None:
    """A pinned upstream tree from the shared sources, checked against the sha256 pinned here."""
    reh = src.rehearsal
    assert reh is not None and reh.registry == "shared"
    if original.exists() and sha256(original) == reh.sha256:
        return
    pinned = shared_dir() / reh.file
    if not pinned.exists():
        raise FetchError(f"{src.component}: {pinned} missing (the shared sources; set {SHARED_ENV})")
    if sha256(pinned) != reh.sha256:
        raise FetchError(f"{src.component}: {pinned} sha256 mismatch with the pinned value; log: {log}")
    original.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(pinned, original)


def _fetch_debian_file(reh: Rehearsal, wanted: tuple[str, str], folder: Path, apt_root: Path, log: Path) -> None:
    """One more file of a Debian source package (its packaging), checked like the tarball."""
    path = folder / wanted[0]
    if path.exists() and sha256(path) == wanted[1]:
        return
    with tempfile.TemporaryDirectory(dir=folder) as work:
        _run(
            ["apt-get", *_apt_options(apt_root), "source", "--download-only", f"{reh.package}/{reh.suite}"],
            log,
            f"{reh.package}: apt-get source",
            cwd=Path(work),
            check=False,
        )
        got = Path(work) / wanted[0]
        if not got.exists() or sha256(got) != wanted[1]:
            raise FetchError(f"{reh.package}: {wanted[0]} not fetched or sha256 mismatch; log: {log}")
        shutil.move(str(got), path)


def table_rows() -> list[tuple[str, str, str, str, str]]:
    """(component, version, where from, checksum, note) for the README/report."""
    rows = []
    for s in SOURCES:
        if s.rehearsal is None:
            rows.append((s.component, s.version, "none reachable", "-", s.note))
        else:
            r = s.rehearsal
            where = f"{r.registry}:{r.suite}/{r.package}/{r.file}"
            rows.append((s.component, s.version, where, r.sha256 or "pip-verified", s.note))
    return rows


if __name__ == "__main__":  # python -m containers.sources: fetch into the cache
    import sys
    from containers.host import cache_dir, debian_mirror

    try:
        print(fetch(cache_dir(), debian_mirror()))
    except FetchError as exc:
        print(f"sources: error: {exc}", file=sys.stderr)
        sys.exit(2)
    for row in table_rows():
        print("\t".join(row))
    os._exit(0)
