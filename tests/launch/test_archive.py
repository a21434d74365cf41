"""Archives: contents, tampered archives refused, image digests (the real archive -> replay ->
compare round trip: tests/integration/test_end_to_end.py)."""

import gzip
import io
import json
import os
import tarfile

import pytest

from containers.files import sha256_bytes
from launch.provenance import archive as archives
from launch.runs import replay as replays
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from tests.conftest import fabric_bench


def fake_run(root, run_id="20260101T000000-torch-ddp-resnet18-n2-abc", **spec_fields):
    spec = {**RunSpec(image_size=32, batch_size=8, iters=1, **spec_fields).as_dict()}
    result = {
        "schema_version": 1,
        "run_id": run_id,
        "benchmark": "train",
        "framework": "torch",
        "engine": "ddp",
        "model": "resnet18",
        "world_size": 2,
        "status": "ok",
        "spec": spec,
        "argv": ["/x/torchrun", "--record-dir", f"/r/{run_id}/ranks"],
        "env": {"OMP_NUM_THREADS": "1"},
        "versions": {"torch": "2.14.1"},
        "throughput": {"total_img_per_s": 10.0, "ci95_img_per_s": 1.0},
        "image": None,
    }
    run_dir = root / run_id
    (run_dir / "ranks").mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps(result))
    (run_dir / "output.log").write_text("log\n")
    (run_dir / "ranks" / "rank-0.jsonl").write_text("{}\n")
    return run_dir, result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One archive of a fake run (collecting the real stack and probe of this host)."""
    root = tmp_path_factory.mktemp("arch")
    run_dir, _ = fake_run(root / "results")
    site = root / "site.toml"
    site.write_text('[fabrics.ethernet]\ninterface = "eth0"\n')
    out = root / "run.tar.gz"
    proc = fabric_bench(
        "archive",
        str(run_dir),
        "--output",
        str(out),
        "--site",
        str(site),
        "--system-name",
        "testbox",
        "--submitter",
        "fabric-bench CI",
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_archive_carries_results_stack_probe_config_and_system(built):
    verified = archives.read(built)
    names = set(verified.members)
    run = "results/ranks/rank-0.jsonl"
    assert {
        "results/result.json",
        "results/output.log",
        run,
        "runs.json",
        "stack/images.json",
        "stack/software.json",
        "host/probe.json",
        "config/site-site.toml",
        "systems/testbox.json",
        "bundle.json",
        "stack/recipe/recipes.json",
        "stack/recipe-inputs/containers/stack.py",
    } <= names
    manifest = verified.manifest
    assert manifest["schema_version"] == 1 and set(manifest["members"]) == names
    software = json.loads(verified.members["stack/software.json"])
    assert software["where"] == "host" and software["versions"]["openmpi"] == "4.1.4"
    assert software["versions"]["ucx"].startswith("1.13") and software["versions"]["libfabric"].startswith("1.17")
    assert "torch==" in software["tools"]["pip_freeze"]["output"]
    system = json.loads(verified.members["systems/testbox.json"])
    assert system["system_name"] == "testbox" and system["submitter"] == "fabric-bench CI"
    assert system["host_processor_vcpu_count"] == os.cpu_count() and "ethernet" in system["host_networking"]
    assert system["framework"] == "PyTorch 2.14.1" and system["other_software_stack"]["openmpi"] == "4.1.4"
    assert json.loads(verified.members["host/probe.json"])["verdicts"]["ethernet"]["usable"] is True


def rewrite(source, target, change):
    """Copy an archive member by member through change(info, data) -> [(info, data), ...]."""
    with tarfile.open(source, "r:gz") as tar, tarfile.open(target, "w:gz") as out:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isreg() else None
            for new_info, new_data in change(info, data):
                out.addfile(new_info, io.BytesIO(new_data) if new_data is not None else None)


def add(name, data=b"x", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


def modified(info, data):
    if info.name == "results/output.log":
        data = b"tampered\n"
        info.size = len(data)
    return [(info, data)]


def unknown_schema(info, data):
    if info.name == "manifest.json":
        manifest = json.loads(data)
        manifest["schema_version"] = 99
        data = json.dumps(manifest).encode()
        info.size = len(data)
    return [(info, data)]


TAMPERED = {
    "modified member": (modified, "checksum mismatch for results/output.log"),
    "dot-dot member": (
        lambda i, d: [(i, d)] + ([add("../escaped.txt")] if i.name == "bundle.json" else []),
        "escapes the target directory",
    ),
    "absolute member": (
        lambda i, d: [(i, d)] + ([add("/tmp/escaped-abs.txt")] if i.name == "bundle.json" else []),
        "absolute or unsafe path",
    ),
    "symlink member": (
        lambda i, d: (
            [(i, d)]
            + ([add("results/link", kind=tarfile.SYMTYPE, link="/etc/passwd")] if i.name == "bundle.json" else [])
        ),
        "is a link",
    ),
    "hardlink member": (
        lambda i, d: (
            [(i, d)]
            + ([add("results/hard", kind=tarfile.LNKTYPE, link="bundle.json")] if i.name == "bundle.json" else [])
        ),
        "is a link",
    ),
    "unknown schema": (unknown_schema, "unknown archive schema_version 99"),
    "extra member": (
        lambda i, d: [(i, d)] + ([add("results/extra.txt")] if i.name == "bundle.json" else []),
        "not in the manifest",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_archives_are_refused_with_one_line_and_nothing_extracted(case, built, tmp_path):
    change, message = TAMPERED[case]
    bad = tmp_path / "work" / "bad.tar.gz"
    bad.parent.mkdir()
    rewrite(built, bad, change)
    target = tmp_path / "work" / "target"
    with pytest.raises(UsageError, match=message):
        archives.extract(archives.read(bad), target)
    proc = fabric_bench("replay", str(bad), "--dry-run", "--results", str(target))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message.split()[0] in proc.stderr
    assert not target.exists() and sorted(p.name for p in (tmp_path / "work").iterdir()) == ["bad.tar.gz"]
    assert not (tmp_path / "escaped.txt").exists() and not os.path.exists("/tmp/escaped-abs.txt")


def test_truncated_and_corrupt_archives_are_refused(built, tmp_path):
    data = built.read_bytes()
    (tmp_path / "truncated.tar.gz").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.tar.gz").write_bytes(b"not a tar at all")
    # a well-formed gzip of a tar cut inside its members (cutting only the zero
    # padding after the last member would leave every member intact)
    tar = gzip.decompress(data)
    (tmp_path / "ungzipped-tail.tar.gz").write_bytes(gzip.compress(tar[: len(tar) // 2]))
    for name in ("truncated.tar.gz", "garbage.tar.gz", "ungzipped-tail.tar.gz"):
        proc = fabric_bench("replay", str(tmp_path / name), "--dry-run")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (name, proc.stderr)
        assert "corrupt or truncated" in proc.stderr or "missing" in proc.stderr


def test_extract_writes_only_inside_a_fresh_target(built, tmp_path):
    written = archives.extract(archives.read(built), tmp_path / "x")
    assert all((tmp_path / "x").resolve() in p.parents for p in written)
    assert json.loads((tmp_path / "x" / "results" / "result.json").read_text())["status"] == "ok"
    with pytest.raises(UsageError, match="not empty"):
        archives.extract(archives.read(built), tmp_path / "x")


def test_replay_refuses_an_image_with_another_digest_unless_allowed(tmp_path):
    image = tmp_path / "fb.sif"
    image.write_bytes(b"image bytes")
    result = {
        "run_id": "r1",
        "spec": RunSpec(runtime="apptainer", image=str(image)).as_dict(),
        "image": {"path": str(image), "digest": "sha256:" + "0" * 64},
    }
    spec = replays.spec_of(result)
    with pytest.raises(UsageError, match="differs from the recorded"):
        replays.check_image(result, spec, allow_mismatch=False)
    assert "differs" in replays.check_image(result, spec, allow_mismatch=True)[0]
    result["image"]["digest"] = "sha256:" + sha256_bytes(b"image bytes")
    assert replays.check_image(result, spec, allow_mismatch=False) == []


def test_argv_shape_ignores_tool_paths_and_run_directories():
    a = ["/usr/bin/mpirun", "-np", "2", "/venv/bin/python3", "-m", "bench.torch_train", "--record-dir", "/a/R1/ranks"]
    b = [
        "/opt/bin/mpirun",
        "-np",
        "2",
        "/other/bin/python3.11",
        "-m",
        "bench.torch_train",
        "--record-dir",
        "/b/R2/ranks",
    ]
    assert replays.argv_shape(a, "R1") == replays.argv_shape(b, "R2")
    assert replays.argv_shape(a, "R1") != replays.argv_shape(b[:2] + ["4"] + b[3:], "R2")


def test_argv_shape_ignores_the_emulated_clusters_name():
    """A run's own emulated cluster is named afresh each run: its replay's argv differs only there."""
    a = ["ip", "netns", "exec", "fbemu-r7acb71-n0", "mpirun", "-H", "fbemu-r7acb71-n0:1,fbemu-r7acb71-n1:1"]
    b = ["ip", "netns", "exec", "fbemu-r5faea6-n0", "mpirun", "-H", "fbemu-r5faea6-n0:1,fbemu-r5faea6-n1:1"]
    assert replays.argv_shape(a, None) == replays.argv_shape(b, None)
    assert replays.argv_shape(a, None) != replays.argv_shape(b[:-1] + ["fbemu-r5faea6-n0:2"], None)


# The real archive -> replay -> compare round trip (a dry run, each replay's link to its original and
# to the archive's bytes, the same spec, the compare, the results index): in
# tests/integration/test_end_to_end.py, on the runs of its sweep, instead of 2 more runs here.


def test_an_archive_renders_the_runs_fabric_recipe_and_the_stack_recipe_it_is_built_from():
    members = archives._recipes([{"spec": {"fabric": "ethernet"}}], {})
    assert {"stack/recipe/ethernet-cpu.def", "stack/recipe/stack-cpu.def"} <= set(members)
    notes = json.loads(members["stack/recipe/recipes.json"])["notes"]
    assert notes["stack-cpu"].startswith("recipe hash ") and notes["ethernet-cpu"].startswith("recipe hash ")
