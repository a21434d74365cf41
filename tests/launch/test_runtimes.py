"""The runtime registry: each runtime's argv, traits and image inspection."""
import pytest

from launch.errors import UsageError
from launch.runtimes import CONTAINER_RUNTIMES, HOST, RUNTIMES, Bind, PodmanRuntime, runtime_named

BINDS = [Bind("/data", "/data", readonly=True), Bind("/run dir", "/run dir")]
ENV = {"B": "2", "A": "1 1"}


def test_host_runs_argv_as_it_is_and_is_not_a_container():
    host = runtime_named(HOST)
    assert host.wrap(None, BINDS, ENV, True, ["python3", "-m", "x"]) == ["python3", "-m", "x"]
    assert not host.containerised and host.version_argv() is None and HOST not in CONTAINER_RUNTIMES


@pytest.mark.parametrize("name, head, bind_flag, env_flag", [
    ("apptainer", ["apptainer", "exec", "--pwd", "/"], "--bind", "--env"),
    ("singularity", ["singularity", "exec", "--pwd", "/"], "--bind", "--env"),
    ("podman", ["podman", "run", "--rm", "--network=host", "--ipc=host", "--pid=host", "--workdir", "/",
                *[item for name in PodmanRuntime.HOST_ENV for item in ("--env", name)],
                "--ulimit", "nofile=16384:16384", "--ulimit", "nproc=16384:16384"], "--volume", "--env"),
])
def test_container_runtimes_bind_set_env_in_order_and_keep_argv_last(name, head, bind_flag, env_flag):
    """podman passes the launcher's and fabrics' variables by prefix, never the whole host
    environment (--env-host would put the host's PATH, and python3, before the image's)."""
    argv = runtime_named(name).wrap("img", BINDS, ENV, False, ["python3", "-m", "x"])
    assert "--env-host" not in argv
    assert argv[:len(head)] == head
    rest = argv[len(head):]
    assert rest[:4] == [bind_flag, "/data:/data:ro", bind_flag, "/run dir:/run dir"]
    assert rest[4:8] == [env_flag, "A=1 1", env_flag, "B=2"]  # sorted, one argv item each: no shell
    assert rest[8:] == ["img", "python3", "-m", "x"]


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
        "apptainer", "singularity", "podman", "ch-run"]


def test_an_unknown_runtime_is_one_usage_error():
    with pytest.raises(UsageError, match="unknown runtime 'docker'; choose from host, apptainer"):
        runtime_named("docker")
