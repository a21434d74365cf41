import json

import pytest

from tests.conftest import fabric_bench


@pytest.mark.parametrize("args, message", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--engine", "mxnet"], "unknown engine 'mxnet'"),
    (["--ranks", "0"], "--ranks must be >= 1"),
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--ranks", "two"], "--ranks"),
    (["--env", "NOEQUALS"], "--env expects NAME=VALUE"),
    (["--timeout", "-1"], "--timeout must be > 0"),
    (["--no-such-flag"], "No such option"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path):
    proc = fabric_bench("run", "--results", str(tmp_path), *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_dry_run_prints_exact_argv_and_env_and_runs_nothing(tmp_path):
    proc = fabric_bench("run", "--dry-run", "--engine", "horovod", "--ranks", "2",
                        "--env", "HOROVOD_LOG_LEVEL=debug", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    argv, env = json.loads(lines["argv"]), json.loads(lines["env"])
    assert argv[argv.index("-np") + 1] == "2" and "bench.torch_train" in argv
    assert env["HOROVOD_LOG_LEVEL"] == "debug"
    assert not any(tmp_path.iterdir())
