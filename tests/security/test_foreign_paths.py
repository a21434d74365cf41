"""Files and images another site names are never opened, hashed or run here, and no file is
written through a link planted at its name (issue 50).

A replay runs this site's image with this site's runtime (--image, --runtime or the site file),
never the archive's: the archive's image path or reference is only shown and its digest only
compared. A path that is not a regular file (a device, a FIFO) is refused in one line before
it is opened, in seconds. Files are written under a new name and renamed into place."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from containers import sbom
from containers.files import write_atomic, write_json_atomic
from launch.cli.image import _keep_sbom, render
from launch.errors import UsageError
from launch.provenance import archive as archives
from launch.provenance import images
from launch.runs import replay as replays
from launch.ranks.runtimes import PodmanRuntime, host_namespaces, runtime_named
from tests.conftest import fabric_bench
from tests.security.conftest import hostile_result, write_archive

RECORDED = "sha256:" + "e" * 64
EVIL = "docker.io/evil/miner:latest"


def archive_naming(tmp_path: Path, image: str, runtime: str = "apptainer", **spec) -> Path:
    """An archive of one run in `image` (its spec and its recorded image both name it)."""
    result = hostile_result(runtime=runtime, image=image, **spec)
    result["image"] = {"path": image, "digest": RECORDED}
    return write_archive(tmp_path / "a.tar.gz", [result])


def one_line_refusal(proc) -> str:
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


@pytest.fixture
def hostile_paths(tmp_path) -> dict[str, str]:
    fifo = tmp_path / "image.fifo"  # a reader blocks on it for ever: no writer ever comes
    os.mkfifo(fifo)
    link = tmp_path / "shadow.sif"
    link.symlink_to("/etc/shadow")
    return {"device": "/dev/zero", "fifo": str(fifo), "link": str(link)}


def secret_digests() -> list[str]:
    """What a hash of the targets would print: none of it may appear."""
    digests = []
    try:
        digests.append(hashlib.sha256(Path("/etc/shadow").read_bytes()).hexdigest())
    except OSError:  # not root here: the content is out of reach anyway
        pass
    return digests


# ---------------------------------------------------------------- the archive's image path


@pytest.mark.parametrize("kind", ["device", "fifo", "link"])
def test_an_image_path_the_archive_names_is_never_opened_or_hashed(tmp_path, hostile_paths, kind):
    path = hostile_paths[kind]
    archive = archive_naming(tmp_path, path)
    started = time.monotonic()
    shown = fabric_bench("replay", str(archive), "--dry-run", "--allow-image-mismatch", timeout=60)
    line = one_line_refusal(shown)
    assert f"ran in the image {path!r} (apptainer), which is never run here" in line
    assert "replay --image names this site's copy" in line
    assert f"image: the archive's {path!r} (apptainer) is not used: refused" in shown.stdout
    assert "image=refused" in shown.stdout and "would start" not in shown.stdout
    for digest in secret_digests():
        assert digest not in shown.stdout + shown.stderr
    ran = fabric_bench("replay", str(archive), "--allow-image-mismatch", "--results", str(tmp_path / "r"), timeout=60)
    assert "never run here" in one_line_refusal(ran) and not (tmp_path / "r").exists()
    assert time.monotonic() - started < 40  # a FIFO opened would hang until the timeout


@pytest.mark.parametrize("kind", ["device", "fifo", "link"])
def test_with_a_local_image_the_archive_s_path_is_only_shown(tmp_path, hostile_paths, kind):
    local = tmp_path / "fb.sif"
    local.write_bytes(b"this site's image")
    archive = archive_naming(tmp_path, hostile_paths[kind])
    proc = fabric_bench(
        "replay", str(archive), "--dry-run", "--allow-image-mismatch", "--image", str(local), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert f"image: the archive's {hostile_paths[kind]!r} is not used; this run uses {str(local)!r}" in proc.stdout
    assert "runtime: apptainer (an image file) (the archive's too)" in proc.stdout
    assert hashlib.sha256(b"this site's image").hexdigest() in proc.stderr  # the local image is what is checked
    (started,) = [line for line in proc.stdout.splitlines() if " would start: " in line]
    assert str(local) in started and hostile_paths[kind] not in started
    for digest in secret_digests():
        assert digest not in proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_local_image_that_is_not_a_regular_file_is_refused_before_it_is_opened(tmp_path, hostile_paths, kind):
    archive = archive_naming(tmp_path, "/images/fb.sif")
    started = time.monotonic()
    proc = fabric_bench(
        "replay", str(archive), "--dry-run", "--allow-image-mismatch", "--image", hostile_paths[kind], timeout=60
    )
    assert f"image {hostile_paths[kind]}: not a regular file; refused" in one_line_refusal(proc)
    assert time.monotonic() - started < 30
    result = archives.read(archive).results()
    spec = replays.spec_of(next(iter(result.values())))
    with pytest.raises(UsageError, match="not a regular file; refused"):
        replays.check_image({}, spec.__class__(**{**spec.as_dict(), "image": hostile_paths[kind]}), True)


# ---------------------------------------------------------------- the archive's image and runtime


def test_a_podman_replay_runs_this_site_s_image_never_the_archive_s(tmp_path):
    archive = archive_naming(tmp_path, EVIL, runtime="podman", launcher="local")
    refused = fabric_bench("replay", str(archive), "--dry-run", "--allow-image-mismatch", "--runtime", "podman")
    assert f"ran in the image {EVIL!r} (podman), which is never run here" in one_line_refusal(refused)
    proc = fabric_bench(
        "replay",
        str(archive),
        "--dry-run",
        "--allow-image-mismatch",
        "--image",
        "localhost/fabric-bench:cpu",
        "--runtime",
        "podman",
    )
    assert proc.returncode == 0, proc.stderr
    assert f"image: the archive's {EVIL!r} is not used; this run uses 'localhost/fabric-bench:cpu'" in proc.stdout
    (started,) = [line for line in proc.stdout.splitlines() if " would start: " in line]
    assert started.split(" would start: ")[1].startswith("podman run ")
    assert " localhost/fabric-bench:cpu torchrun " in started and "evil" not in started
    assert f"recorded {RECORDED}" in proc.stderr  # the archive's digest: compared against, nothing more


def test_the_runtime_is_this_site_s_never_the_archive_s(tmp_path):
    archive = archive_naming(tmp_path, EVIL, runtime="podman", launcher="local")
    local = tmp_path / "fb.sif"
    local.write_bytes(b"x")
    planned = replays.plan(archives.read(archive), allow_image_mismatch=True, image=str(local))
    assert (planned[0].spec.runtime, planned[0].spec.image) == ("apptainer", str(local))
    assert planned[0].changes["runtime"] == "runtime: apptainer (an image file); the archive's podman is not used"
    with pytest.raises(UsageError, match="name its runtime with --runtime"):
        replays.plan(archives.read(archive), allow_image_mismatch=True, image="localhost/fabric-bench:cpu")
    site = tmp_path / "site.toml"
    site.write_text('runtime = "charliecloud"\n')
    proc = fabric_bench(
        "replay", str(archive), "--dry-run", "--allow-image-mismatch", "--image", "/srv/fb", "--site", str(site)
    )
    assert proc.returncode == 0, proc.stderr
    assert f"runtime: charliecloud (the site file {site}); the archive's podman is not used" in proc.stdout
    assert "ch-run" in next(line for line in proc.stdout.splitlines() if " would start: " in line)
    on_host = replays.plan(archives.read(archive), runtime="host", allow_image_mismatch=True)[0]
    assert (on_host.spec.runtime, on_host.spec.image) == ("host", None)


def test_the_dry_run_names_every_field_it_replaced_and_why(tmp_path):
    archive = archive_naming(tmp_path, EVIL, runtime="podman", launcher="mpirun", hostfile="/etc/shadow")
    local = tmp_path / "fb.sif"
    local.write_bytes(b"x")
    proc = fabric_bench(
        "replay",
        str(archive),
        "--dry-run",
        "--allow-image-mismatch",
        "--image",
        str(local),
        "--fabric",
        "ethernet",
        "--hostfile",
        str(tmp_path / "hosts"),
    )
    assert proc.returncode == 0, proc.stderr
    for line in (
        f"image: the archive's {EVIL!r} is not used; this run uses {str(local)!r} (--image)",
        "runtime: apptainer (an image file); the archive's podman is not used",
        "fabric: the archive's none replaced by this site's ethernet (--fabric)",
        f"hostfile: the archive's /etc/shadow is not used; this site's {tmp_path / 'hosts'} (--hostfile)",
        "from the archive: launcher = mpirun",
    ):
        assert f"  {line}\n" in proc.stdout, line


# ---------------------------------------------------------------- podman's host namespaces


def test_podman_shares_only_the_host_namespaces_a_run_needs():
    def flags(shared):
        return [a for a in PodmanRuntime(shared).wrap("img", [], {}, False, ["x"]) if a.endswith("=host")]

    assert flags(host_namespaces(None, container_per_rank=False, ranks_per_node=2)) == []
    assert flags(host_namespaces("ethernet", container_per_rank=False, ranks_per_node=4)) == ["--network=host"]
    assert flags(host_namespaces("infiniband", container_per_rank=True, ranks_per_node=1)) == ["--network=host"]
    assert flags(host_namespaces(None, container_per_rank=True, ranks_per_node=2)) == [
        "--network=host",
        "--ipc=host",
        "--pid=host",
    ]
    # a caller that does not say keeps today's contract (the launch snapshots)
    assert flags(None) == ["--network=host", "--ipc=host", "--pid=host"]
    assert runtime_named("podman", ("network",)).wrap("i", [], {}, False, ["x"])[3] == "--network=host"


def test_a_podman_replay_in_one_container_shares_no_host_pid_or_ipc(tmp_path):
    archive = archive_naming(tmp_path, EVIL, runtime="podman", launcher="local", fabric="ethernet")
    planned = replays.plan(
        archives.read(archive), allow_image_mismatch=True, image="localhost/fb:cpu", runtime="podman"
    )
    argv, _ = replays.command_of(planned[0], tmp_path / "r")
    assert "localhost/fb:cpu" in argv and "--ipc=host" not in argv and "--pid=host" not in argv


# ---------------------------------------------------------------- files written through a planted link


def test_write_atomic_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "out.json"
    target.symlink_to(victim)
    write_atomic(target, "new")
    assert victim.read_text() == "untouched" and not target.is_symlink() and target.read_text() == "new"
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would have made it
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(OSError):
        write_json_atomic(folder, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "out.json", "victim"]  # no temporary left


def sbom_of(digest: str) -> str:
    return sbom.document(
        sbom.parse_probe("bash\t5.2.15-2+b2\t\t\n@@pip\n[]\n@@cc\n\n@@pycc\nGCC 12.2.0\n@@local\n"),
        image_digest=digest,
        flavour="cpu-debian",
        fabric="stack",
        base_digest="",
    )


def test_image_pull_writes_the_sbom_beside_out_never_through_a_planted_link(tmp_path):
    digest = "sha256:" + "a" * 64
    pulled = SimpleNamespace(image=str(tmp_path / "stack.sif"), image_digest=digest)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    planted = sbom.path_for(pulled.image, "apptainer", digest)
    planted.symlink_to(victim)
    text = sbom_of(digest)
    written = _keep_sbom(pulled, "apptainer", [images.Expectation("archive a.tar.gz", digest, {}, text)])
    assert written == str(planted) and not planted.is_symlink() and planted.read_text() == text
    assert victim.read_text() == "untouched"


def test_reference_files_and_rendered_recipes_are_never_written_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    elsewhere = tmp_path / "elsewhere.json"  # what a link at the reference file's name points to
    elsewhere.write_text(f'{{"schema": "{images.SCHEMA}", "images": []}}\n')
    references = tmp_path / "images.json"
    references.symlink_to(elsewhere)
    Path(str(references) + ".sig").symlink_to(victim)
    digest = "sha256:" + "b" * 64
    entry = images.reference_entry(f"127.0.0.1:5000/fb@{digest}", "apptainer", digest, {}, "")
    images.write_references(references, entry)
    assert victim.read_text() == "untouched" and "[]" in elsewhere.read_text() and not references.is_symlink()
    assert not Path(str(references) + ".sig").exists()  # unsigned: the stale name is removed, not followed
    assert images.read_references(references, verify=False)[0]["image_digest"] == digest
    out = tmp_path / "recipes"
    out.mkdir()
    (out / "Dockerfile").symlink_to(victim)
    render(fabric="ethernet", flavour="cpu", out=out, base="site", cpu_base="")
    assert victim.read_text() == "untouched" and (out / "Dockerfile").read_text().startswith(("#", "FROM", "ARG"))
