import json

import pytest

from tests.conftest import fabric_bench


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--engine", "mxnet"], "unknown engine 'mxnet'"),
        (["--ranks", "0"], "--ranks 0 is refused: an integer 1..1048576"),
        (["--batch-size", "0"], "--batch-size 0 is refused: an integer 1..65536"),
        (["--ranks", "two"], "--ranks"),
        (["--env", "NOEQUALS"], "--env expects NAME=VALUE"),
        (["--timeout", "-1"], "--timeout must be > 0"),
        (["--no-such-flag"], "No such option"),
        (["--fabric", "token-ring"], "unknown fabric 'token-ring'"),
        (["--fabric", "infiniband"], "fabric 'infiniband' is not present"),
        (["--launcher", "pbs"], "unknown launcher 'pbs'"),
        (["--runtime", "docker", "--image", "x"], "unknown runtime 'docker'"),
        (["--runtime", "apptainer"], "needs --image"),
        (["--nodes", "2", "--ranks-per-node", "2", "--ranks", "3", "--launcher", "mpirun"], "contradicts"),
        (["--nodes", "2"], "--launcher local runs on this host only"),
        (["--site", "/nonexistent/site.toml"], "site file not found"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = fabric_bench("run", "--results", str(tmp_path), *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_dry_run_prints_exact_argv_and_env_and_runs_nothing(tmp_path):
    proc = fabric_bench(
        "run",
        "--dry-run",
        "--engine",
        "horovod",
        "--ranks",
        "2",
        "--env",
        "HOROVOD_LOG_LEVEL=debug",
        "--results",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    argv, env = json.loads(lines["argv"]), json.loads(lines["env"])
    assert argv[argv.index("-np") + 1] == "2" and "bench.torch_train" in argv
    assert env["HOROVOD_LOG_LEVEL"] == "debug"
    assert not any(tmp_path.iterdir())


def test_a_fabric_whose_devices_are_missing_is_refused_before_launch(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[fabrics.infiniband]\ninterface = "ib0"\nhca = "mlx5_0"\n')
    results = tmp_path / "results"
    dry = fabric_bench("run", "--dry-run", "--site", str(site), "--fabric", "infiniband", "--results", str(results))
    assert dry.returncode == 0 and "host devices and libraries of fabric infiniband" in dry.stdout
    assert "NCCL" not in dry.stdout and "UCX_NET_DEVICES" in dry.stdout  # CPU run: no NCCL preset
    real = fabric_bench("run", "--site", str(site), "--fabric", "infiniband", "--results", str(results))
    assert real.returncode == 2 and real.stderr.count("\n") == 1
    assert "needs /dev/infiniband" in real.stderr
    assert not results.exists()


def test_version_names_the_package_and_the_commit():
    from containers.files import bundle_commit

    proc = fabric_bench("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("fabric-bench 0.1.0 (")
    assert bundle_commit().split("-")[0] in proc.stdout
