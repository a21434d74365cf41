"""Another site's archive is data, never code: every way its fields could run code here, or
break out of a job script, is refused in one line before anything runs (issue 28)."""

import io
import json
import tarfile
import tracemalloc

import pytest

from launch.provenance import archive as archives
from launch.runs import replay as replays
from launch.errors import UsageError
from launch.trust import ArchiveLimits
from tests.conftest import fabric_bench
from tests.security.conftest import hostile_result, write_archive


@pytest.mark.parametrize(
    "name, value",
    [
        ("PYTHONWARNINGS", "ignore::0:os.system('touch {canary}'):"),
        ("BROWSER", "touch {canary}"),
        ("BASH_ENV", "{canary}.sh"),
        ("LD_PRELOAD", "{canary}.so"),
        ("PYTHONPATH", "{canary}.d"),
        ("PATH", "{canary}.bin"),
        ("NCCL_NET_PLUGIN", "{canary}"),  # an allowed family, but it loads a library by name
        ("OMPI_MCA_plm_rsh_agent", "touch {canary}"),
        ("FI_PROVIDER_PATH", "{canary}.d"),
    ],
)
def test_a_replayed_archive_cannot_carry_a_variable_that_runs_code(tmp_path, canary, name, value):
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(extra_env={name: value.format(canary=canary)})])
    out = tmp_path / "replays"
    proc = fabric_bench("replay", str(archive), "--results", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"environment variable {name} is not one a run may carry from another site: refused" in proc.stderr
    assert "--accept-env cannot admit it" in proc.stderr
    assert not canary.exists() and not out.exists()  # nothing ran, nothing was written


def test_variables_the_bundle_sets_pass_and_the_dry_run_shows_every_value_from_the_archive(tmp_path):
    archive = write_archive(
        tmp_path / "a.tar.gz",
        [
            hostile_result(
                extra_env={"NCCL_DEBUG": "INFO", "UCX_TLS": "tcp"},
                hostfile="/tmp/hosts",
                partition="gpu",
                account="proj",
                launcher="mpirun",
            )
        ],
    )
    proc = fabric_bench("replay", str(archive), "--dry-run", "--hostfile", "/etc/fabric-bench/hosts")
    assert proc.returncode == 0, proc.stderr
    for line in (
        "from the archive: env NCCL_DEBUG=INFO",
        "from the archive: env UCX_TLS=tcp",
        "from the archive: partition = gpu",
        "from the archive: account = proj",
        "from the archive: launcher = mpirun",
    ):
        assert line in proc.stdout
    assert "archive " in proc.stdout and ": unsigned" in proc.stdout


def test_a_hostfile_from_the_archive_is_never_used_here(tmp_path):
    """mpirun reads the hostfile and starts daemons on the hosts it names: the archive's path is
    the other site's, and this site names its own."""
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(hostfile="/etc/shadow", launcher="mpirun")])
    shown = fabric_bench("replay", str(archive), "--dry-run")
    assert "from the archive: hostfile = /etc/shadow: refused (a path at the other site" in shown.stdout
    assert shown.returncode == 2 and "replay --hostfile names this site's" in shown.stderr.splitlines()[-1]
    run = fabric_bench("replay", str(archive), "--results", str(tmp_path / "r"))
    assert run.returncode == 2 and "hostfile /etc/shadow is a path at the other site" in run.stderr
    assert not (tmp_path / "r").exists()
    planned = replays.plan(archives.read(archive), allow_image_mismatch=True, hostfile="/site/hosts")
    assert planned[0].spec.hostfile == "/site/hosts"


def test_a_variable_accepted_by_name_is_shown_as_coming_from_the_archive(tmp_path):
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(extra_env={"MY_SITE_KNOB": "1"})])
    refused = fabric_bench("replay", str(archive), "--dry-run")
    assert refused.returncode == 2 and "MY_SITE_KNOB" in refused.stderr
    accepted = fabric_bench("replay", str(archive), "--dry-run", "--accept-env", "MY_SITE_KNOB")
    assert accepted.returncode == 0 and "from the archive: env MY_SITE_KNOB=1" in accepted.stdout


@pytest.mark.parametrize(
    "field, value, line",
    [
        ("partition", "gpu\ntouch {canary}", "--partition holds a control character ('\\n')"),
        ("account", "a\rb", "--account holds a control character ('\\r')"),
        ("time_limit", "10\n#SBATCH --time=99999", "--time-limit holds a control character"),
        ("hostfile", "/tmp/h\x00", "--hostfile holds a control character"),
        ("extra_env", {"NCCL_DEBUG": "INFO\ntouch {canary}"}, "environment variable NCCL_DEBUG holds a control"),
        ("extra_env", {"NCCL_X;touch": "1"}, "environment variable name 'NCCL_X;touch' is not an identifier"),
        ("ranks", "2", "spec field ranks must be int, got '2'"),
        ("fusion_threshold_mb", "1e300", "spec field fusion_threshold_mb must be float or null"),
        ("nodes", True, "spec field nodes must be int, got True"),
    ],
)
def test_fields_that_reach_a_job_script_or_a_type_are_refused_in_one_line(tmp_path, canary, field, value, line):
    value = (
        {k: v.format(canary=canary) for k, v in value.items()}
        if isinstance(value, dict)
        else value.format(canary=canary)
        if isinstance(value, str)
        else value
    )
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(launcher="sbatch", **{field: value})])
    proc = fabric_bench("replay", str(archive), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and line in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not canary.exists() and not (tmp_path / "r").exists()


def test_a_model_name_on_a_communication_benchmark_cannot_break_the_job_script(tmp_path):
    """model is validated against the catalog for training only; its text still may not break a line."""
    archive = write_archive(
        tmp_path / "a.tar.gz",
        [hostile_result(benchmark="halo", launcher="sbatch", model="x\n#SBATCH --wrap=touch /tmp/x")],
    )
    with pytest.raises(UsageError, match="--model holds a control character"):
        replays.plan(archives.read(archive))


def test_a_manifest_entry_that_is_not_an_object_is_one_line(tmp_path):
    data = json.dumps(hostile_result()).encode()
    manifest = {"schema_version": 1, "members": {f"results/{hostile_result()['run_id']}/result.json": "abc"}}
    path = tmp_path / "bad.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, body in (
            ("manifest.json", json.dumps(manifest).encode()),
            (f"results/{hostile_result()['run_id']}/result.json", data),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    proc = fabric_bench("replay", str(path), "--dry-run")
    assert proc.returncode == 2 and "is not an object" in proc.stderr and proc.stderr.count("\n") == 1


def _bomb(path, members: int, member_bytes: int):
    """A gzip'd tar of zero-filled members: small on disk, large unpacked."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i in range(members):
            info = tarfile.TarInfo(f"results/{i}.bin")
            info.size = member_bytes
            tar.addfile(info, io.BytesIO(bytes(member_bytes)))
    return path


@pytest.mark.parametrize(
    "members, member_bytes, limits, line",
    [
        (1, 64 * 2**20, ArchiveLimits(member_bytes=2**20), "unpacks to 67108864 bytes, over the 1 MiB limit"),
        (20, 16 * 2**20, ArchiveLimits(member_bytes=32 * 2**20, total_bytes=64 * 2**20), "unpacks to more than 64 MiB"),
        (30, 10, ArchiveLimits(members=20), "has more than 20 members"),
    ],
)
def test_a_decompression_bomb_is_refused_before_memory_grows(tmp_path, members, member_bytes, limits, line):
    bomb = _bomb(tmp_path / "bomb.tar.gz", members, member_bytes)
    assert bomb.stat().st_size < 2 * 2**20  # small on disk
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match=line):
            archives.read(bomb, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # memory follows what the limits admit (the members read before the refusal, about twice
    # over while tarfile hands them out, and gzip's ~10 MiB burst), never the unpacked size
    admitted = (
        min(limits.total_bytes, (members - 1) * member_bytes)
        if members * member_bytes > limits.total_bytes and member_bytes <= limits.member_bytes
        else 0
    )
    assert peak < 16 * 2**20 + 2.5 * admitted, peak
    assert members * member_bytes < 2**26 or peak < members * member_bytes / 2, peak


def test_the_default_limits_are_stated_in_replay_help():
    out = fabric_bench("replay", "--help").stdout
    assert "20000 members" in out and "128 MiB each" in out and "512 MiB unpacked" in out


def test_an_archive_written_over_a_planted_temp_link_leaves_the_link_s_target_alone(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep")
    out = tmp_path / "out.tar.gz"
    (tmp_path / "out.tar.gz.tmp").symlink_to(target)  # the old fixed temp name
    archives.write({"a": b"1"}, out)
    assert target.read_text() == "keep" and archives.read(out).members == {"a": b"1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar.gz", "out.tar.gz.tmp", "precious"]


def test_a_failed_archive_write_leaves_no_temp_file(tmp_path):
    out = tmp_path / "out.tar.gz"
    out.mkdir()  # the final rename fails: a directory is in the way
    with pytest.raises(UsageError, match="cannot write"):
        archives.write({"a": b"1"}, out)
    assert [p.name for p in tmp_path.iterdir()] == ["out.tar.gz"]


BOMB = b"[" * 100_000 + b"]" * 100_000


def _raw_archive(path, members: dict[str, bytes], manifest: bytes | None = None):
    """A tar.gz written member by member, its manifest given or computed (an attacker's own writer)."""
    from containers.files import sha256_bytes

    listed = {
        "schema_version": 1,
        "members": {n: {"sha256": sha256_bytes(d), "bytes": len(d)} for n, d in members.items()},
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, body in (("manifest.json", manifest or json.dumps(listed).encode()), *members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def test_a_manifest_nested_100k_deep_is_one_line(tmp_path):
    """json.loads stopped it with a RecursionError: a traceback instead of a refusal."""
    archive = _raw_archive(tmp_path / "a.tar.gz", {}, manifest=BOMB)
    proc = fabric_bench("replay", str(archive), "--dry-run", "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "manifest.json is nested more than 64 levels deep" in proc.stderr and not (tmp_path / "r").exists()


def test_a_result_nested_100k_deep_is_left_out_with_a_warning(tmp_path):
    good = hostile_result()
    archive = write_archive(tmp_path / "a.tar.gz", [good], **{"results/evil/result.json": BOMB})
    proc = fabric_bench("replay", str(archive), "--dry-run")
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr
    assert "results/evil/result.json: not a result: nested more than 64 levels deep" in proc.stderr
    assert good["run_id"] in proc.stdout


def test_an_archive_s_image_records_of_the_wrong_shape_are_one_line_or_ignored(tmp_path):
    from launch.provenance import images

    for body, expected in (
        (BOMB, "stack/images.json is nested more than 64 levels deep"),
        (
            json.dumps({"x": {"digest_recorded": ["sha256:" + "a" * 64], "inspect": BOMB.decode()}}).encode(),
            "records no image with digest",
        ),
    ):
        archive = write_archive(tmp_path / "a.tar.gz", [hostile_result()], **{"stack/images.json": body})
        with pytest.raises(UsageError, match=expected):
            images.from_archive(archives.read(archive), "sha256:" + "a" * 64)


def test_a_member_that_is_a_file_and_a_folder_at_once_is_refused(tmp_path):
    """`results/x` as a file and `results/x/y` too: extracting it failed half way with a traceback."""
    archive = _raw_archive(tmp_path / "a.tar.gz", {"results/x": b"1", "results/x/y": b"2"})
    with pytest.raises(UsageError, match="'results/x' is a file and a folder"):
        archives.read(archive)
    proc = fabric_bench("replay", str(archive), "--dry-run")
    assert proc.returncode == 2 and "is a file and a folder" in proc.stderr and proc.stderr.count("\n") == 1
