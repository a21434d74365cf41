"""The runtime registry: each runtime's argv, traits and image inspection."""

import pytest

from launch.errors import UsageError
from launch.ranks.runtimes import CONTAINER_RUNTIMES, HOST, RUNTIMES, Bind, PodmanRuntime, runtime_named

BINDS = [Bind("/data", "/data", readonly=True), Bind("/run dir", "/run dir")]
ENV = {"B": "2", "A": "1 1"}


def test_host_runs_argv_as_it_is_and_is_not_a_container():
    host = runtime_named(HOST)
    assert host.wrap(None, BINDS, ENV, True, ["python3", "-m", "x"]) == ["python3", "-m", "x"]
    assert not host.containerised and host.version_argv() is None and HOST not in CONTAINER_RUNTIMES


@pytest.mark.parametrize("name", CONTAINER_RUNTIMES)
def test_a_container_runtime_refuses_to_wrap_without_an_image(name):
    """RunSpec refuses such a run first; wrap itself never puts None into an argv."""
    with pytest.raises(UsageError, match=f"--runtime {name} needs --image"):
        runtime_named(name).wrap(None, BINDS, ENV, False, ["python3"])


@pytest.mark.parametrize(
    "name, head, bind_flag, env_flag",
    [
        (
            "podman",
            [
                "podman",
                "run",
                "--rm",
                "--network=host",
                "--ipc=host",
                "--pid=host",
                "--workdir",
                "/",
                *[item for name in PodmanRuntime.HOST_ENV for item in ("--env", name)],
                "--ulimit",
                "nofile=16384:16384",
                "--ulimit",
                "nproc=16384:16384",
            ],
            "--volume",
            "--env",
        ),
    ],
)
def test_container_runtimes_bind_set_env_in_order_and_keep_argv_last(name, head, bind_flag, env_flag):
    """podman passes the launcher's and fabrics' variables by prefix, never the whole host
    environment (--env-host would put the host's PATH, and python3, before the image's)."""
    argv = runtime_named(name).wrap("img", BINDS, ENV, False, ["python3", "-m", "x"])
    assert "--env-host" not in argv
    assert argv[: len(head)] == head
    rest = argv[len(head) :]
    assert rest[:4] == [bind_flag, "/data:/data:ro", bind_flag, "/run dir:/run dir"]
    assert rest[4:8] == [env_flag, "A=1 1", env_flag, "B=2"]  # sorted, one argv item each: no shell
    assert rest[8:] == ["img", "python3", "-m", "x"]


@pytest.mark.parametrize("name", ["apptainer", "singularity"])
def test_apptainer_sets_the_environment_with_env_inside_the_image(name):
    argv = runtime_named(name).wrap("img", BINDS, ENV, False, ["python3", "-m", "x"])
    assert argv[:4] == [name, "exec", "--pwd", "/"]
    assert argv[4:8] == ["--bind", "/data:/data:ro", "--bind", "/run dir:/run dir"]
    assert argv[8:] == [
        "img",
        "env",
        "-u",
        "LD_PRELOAD",
        "-u",
        "PYTHONHOME",
        "-u",
        "PYTHONPATH",
        "A=1 1",
        "B=2",
        "python3",
        "-m",
        "x",
    ]  # the host's Python cleared; sorted, one item each


def test_the_image_environment_command_clears_the_hosts_python_for_real(tmp_path):
    """Issue 42, item 10: site modules' PYTHONPATH, PYTHONHOME and LD_PRELOAD pass through Apptainer
    (and ch-run) into the image. The environment command clears them; here the same argv runs
    through this host's own `env` with all three set, and the program sees none of them, while a
    value the run sets itself (extra_env) wins."""
    import json
    import os
    import subprocess
    import sys

    from launch.ranks.runtimes import HOST_LEAKS, env_command, host_leaks_set

    show = [
        sys.executable,
        "-I",
        "-c",
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('LD_PRELOAD', 'PYTHONHOME', "
        "'PYTHONPATH', 'A')}))",
    ]
    leaky = {**os.environ, "PYTHONPATH": str(tmp_path / "site-python"), "PYTHONHOME": sys.prefix, "LD_PRELOAD": ""}
    assert host_leaks_set(leaky) == list(HOST_LEAKS)
    seen = json.loads(
        subprocess.run(
            env_command({"A": "1"}) + show, env=leaky, capture_output=True, text=True, check=True, timeout=60
        ).stdout
    )
    assert seen == {"LD_PRELOAD": None, "PYTHONHOME": None, "PYTHONPATH": None, "A": "1"}
    kept = json.loads(
        subprocess.run(
            env_command({"PYTHONPATH": "/opt/mine"}) + show,
            env=leaky,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert kept["PYTHONPATH"] == "/opt/mine" and kept["PYTHONHOME"] is None


def test_charliecloud_unsets_the_hosts_python_in_the_image():
    argv = runtime_named("charliecloud").wrap("img", [], {"PYTHONPATH": "/opt/mine"}, False, ["python3"])
    assert "--unset-env=LD_PRELOAD" in argv and "--unset-env=PYTHONHOME" in argv
    assert "--unset-env=PYTHONPATH" not in argv and "--set-env=PYTHONPATH=/opt/mine" in argv


def apptainer_env_flag_values(argv: list[str]) -> dict[str, str]:
    """What Apptainer's --env (pflag StringToString) makes of each value: a value with exactly one
    '=' is kept whole; one with two or more is read as CSV and split at its commas, each piece
    needing its own '=' (../shared/ENVIRONMENT.md, measured with apptainer 1.4.5)."""
    parsed: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:]):
        if flag != "--env":
            continue
        pieces = [value] if value.count("=") == 1 else value.split(",")
        for piece in pieces:
            if "=" not in piece:
                raise ValueError(f"{piece} must be formatted as key=value")
            name, _, rest = piece.partition("=")
            parsed[name] = rest
    return parsed


@pytest.mark.parametrize("name", ["apptainer", "singularity"])
def test_a_multi_rail_value_reaches_the_program_whole(name):
    """NCCL_IB_HCA==mlx5_0,mlx5_1 as --env stopped the run before it started (issue 29)."""
    env = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1", "UCX_TLS": "rc,sm,self"}
    argv = runtime_named(name).wrap("img", [], env, True, ["python3"])
    apptainer_env_flag_values(argv)  # nothing the runtime's own parser could split or refuse
    assert "--env" not in argv
    inside = argv[argv.index("img") + 1 :]
    assert inside[0] == "env" and inside[-1] == "python3"
    assert dict(item.split("=", 1) for item in inside[1:-1] if "=" in item) == env


def test_the_multi_rail_value_as_apptainer_env_flag_would_be_refused():
    """The check above can fail: the old argv shape is refused the way Apptainer refuses it."""
    with pytest.raises(ValueError, match="mlx5_1 must be formatted as key=value"):
        apptainer_env_flag_values(["--env", "NCCL_IB_HCA==mlx5_0,mlx5_1"])


def test_podman_keeps_a_multi_rail_value_whole():
    argv = runtime_named("podman").wrap("img", [], {"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}, True, ["x"])
    assert argv[argv.index("NCCL_IB_HCA==mlx5_0,mlx5_1") - 1] == "--env"  # podman splits at the first '=' only


def test_gpus_reach_the_container():
    assert "--nv" in runtime_named("apptainer").wrap("i", [], {}, True, ["x"])
    assert "nvidia.com/gpu=all" in runtime_named("podman").wrap("i", [], {}, True, ["x"])


def test_charliecloud_separates_its_options_from_argv():
    argv = runtime_named("charliecloud").wrap("/img", BINDS, ENV, False, ["x", "--flag"])
    assert argv[:3] == ["ch-run", "--cd", "/"] and argv[-4:] == ["/img", "--", "x", "--flag"]
    assert "--set-env=A=1 1" in argv and "/data:/data" in argv  # ch-run binds are read-write only


def test_traits_the_other_modules_ask_for():
    assert {n for n in RUNTIMES if RUNTIMES[n].image_is_file} == {"apptainer", "singularity"}
    assert runtime_named("apptainer").inspect_argv("x.sif") == ["apptainer", "inspect", "--json", "--all", "x.sif"]
    assert runtime_named("podman").inspect_argv("img") == ["podman", "image", "inspect", "img"]
    assert runtime_named("charliecloud").inspect_argv("img") is None
    assert [runtime_named(n).version_argv()[0] for n in CONTAINER_RUNTIMES] == [
        "apptainer",
        "singularity",
        "podman",
        "ch-run",
    ]


def test_an_unknown_runtime_is_one_usage_error():
    with pytest.raises(UsageError, match="unknown runtime 'docker'; choose from host, apptainer"):
        runtime_named("docker")


def test_a_result_records_the_hosts_leaks_and_which_the_image_cleared(monkeypatch):
    """Issue 42, item 10, the record: launch.host_env names the leaks set where the run was
    launched; a container run clears them (but one the run sets itself), the host runtime keeps them."""
    from launch.ranks.runspec import RunSpec
    from launch.runs.run import host_env_record

    monkeypatch.delenv("PYTHONHOME", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/site/modules/python")
    monkeypatch.setenv("LD_PRELOAD", "/site/lib/libhook.so")
    container = runtime_named("apptainer")
    assert host_env_record(container, RunSpec()) == {
        "set": ["LD_PRELOAD", "PYTHONPATH"],
        "cleared_in_image": ["LD_PRELOAD", "PYTHONPATH"],
    }
    own = RunSpec(extra_env={"PYTHONPATH": "/opt/mine"})
    assert host_env_record(container, own)["cleared_in_image"] == ["LD_PRELOAD"]
    assert host_env_record(runtime_named(HOST), RunSpec())["cleared_in_image"] == []
    for name in ("PYTHONPATH", "LD_PRELOAD"):
        monkeypatch.delenv(name)
    assert host_env_record(container, RunSpec()) == {"set": [], "cleared_in_image": []}
