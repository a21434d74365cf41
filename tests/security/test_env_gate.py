"""One gate for environment from a file that travels between sites, and never-admit by class (issue 50).

The attack that opened it: an experiment file's [run.env] naming OMPI_MCA_orte_fork_agent
skipped the allow-list replayed archives get, and the agent ran in front of every rank. Then:
never-admit names were matched case-sensitively and missed synonyms and other prefixes
(OMPI_MCA_mca_param_files, PRTE_MCA_, lower case), so they merely "needed --accept-env".
These tests write the hostile files for real, run the real CLI, and show on this machine's
Open MPI that the synonyms they name are honoured.
"""

import json
import os
import shutil
import subprocess

import pytest

from launch import foreign_env
from launch.errors import UsageError
from launch.plan.experiment import load_experiment
from tests.conftest import fabric_bench
from tests.security.conftest import hostile_result, write_archive

# (name, the never-admitted class its spelling falls in, the value an attacker gives it)
HOSTILE = [
    ("OMPI_MCA_orte_fork_agent", "program", "{script}"),
    ("OMPI_MCA_ORTE_FORK_AGENT", "program", "{script}"),
    ("ompi_mca_orte_fork_agent", "program", "{script}"),
    ("PRTE_MCA_prte_fork_agent", "program", "{script}"),
    ("prte_mca_plm_ssh_agent", "program", "{script}"),
    ("OMPI_MCA_orte_rsh_agent", "program", "{script}"),
    ("OMPI_MCA_pls_rsh_agent", "program", "{script}"),
    ("OMPI_MCA_orte_launch_agent", "program", "{script}"),
    ("OMPI_MCA_orte_xterm", "program", "0"),
    ("UCX_MPI_GDB_COMMAND", "program", "{script}"),
    ("SLURM_TASK_PROLOG", "launcher option", "{script}"),
    ("APPTAINERENV_LD_PRELOAD", "launcher option", "{dir}/x.so"),
    ("APPTAINER_BIND", "launcher option", "/:/host"),
    ("LD_PRELOAD", "component", "{dir}/x.so"),
    ("ld_preload", "component", "{dir}/x.so"),
    ("NCCL_NET_PLUGIN", "component", "{dir}/libnccl-net.so"),
    ("nccl_net_plugin", "component", "evil"),
    ("NCCL_TUNER_PLUGIN", "component", "evil"),
    ("FI_HOOK", "component", "ofi_hook_trace"),
    ("OMPI_MCA_mca_param_files", "settings", "{dir}/params.conf"),
    ("OMPI_MCA_mca_base_envar_file_prefix", "settings", "{dir}/env.conf"),
    ("OMPI_MCA_mca_base_env_list", "settings", "LD_PRELOAD={dir}/x.so"),
    ("PMIX_MCA_mca_base_component_path", "settings", "{dir}"),
    ("NCCL_CONF_FILE", "settings", "{dir}/nccl.conf"),
    ("XLA_FLAGS", "settings", "--xla_dump_to={dir}"),
    ("PMIX_SERVER_URI21", "rendezvous", "pmix-server.1;tcp4://10.9.9.9:1"),
    ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "rendezvous", "10.9.9.9"),
    ("OMPI_MCA_orte_server", "rendezvous", "file:{dir}/uri"),
    ("OPAL_PREFIX", "path", "{dir}"),
    ("OPAL_PKGLIBDIR", "path", "{dir}"),
    ("OMPI_MCA_opal_stacktrace_output", "path", "file:{dir}/trace"),
    ("UCX_MODULE_DIR", "path", "{dir}"),
    ("UCX_LOG_FILE", "path", "{dir}/ucx.log"),
    ("FI_PROVIDER_PATH", "path", "{dir}"),
    ("fi_provider_path", "path", "{dir}"),
    ("HOROVOD_TIMELINE", "path", "{dir}/timeline.json"),
    ("horovod_timeline", "path", "{dir}/timeline.json"),
    ("HOROVOD_AUTOTUNE_LOG", "path", "{dir}/autotune.csv"),
    ("NCCL_DEBUG_FILE", "path", "{dir}/%h.log"),
]
NAMES = [name for name, _, _ in HOSTILE]
BASE = """[experiment]
name = "hostile"
time_limit_s = 60

[matrix]
ranks_per_node = [1]

[run]
framework = "torch"
engine = "horovod"
model = "resnet18"
image_size = 32
batch_size = 8
iters = 1
launcher = "mpirun"
runtime = "host"
"""


def experiment_file(tmp_path, env: dict[str, str], name: str = "hostile.experiment.toml"):
    """A real experiment file whose [run.env] sets `env`."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in env.items()]  # a JSON string is a TOML one
    path = tmp_path / name
    path.write_text(BASE + "[run.env]\n" + "\n".join(lines) + "\n")
    return path


def hostile_env(tmp_path, script) -> dict[str, str]:
    return {name: value.format(script=script, dir=tmp_path) for name, _, value in HOSTILE}


def refusal(proc: subprocess.CompletedProcess) -> str:
    """The one line a refusal is, with exit 2 and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("name, kind, value", HOSTILE, ids=NAMES)
def test_each_hostile_name_in_an_experiment_file_is_refused_even_when_accepted(tmp_path, script, name, kind, value):
    path = experiment_file(tmp_path, {name: value.format(script=script, dir=tmp_path)})
    for accepted in ((), (name,)):
        with pytest.raises(UsageError) as refused:
            load_experiment(path, accepted)
        line = str(refused.value)
        assert line.startswith(f"{path.name}: [run.env]: environment variable {name} is not one a run may carry")
        assert "refused, " in line and line.endswith("--accept-env cannot admit it"), line
    assert foreign_env.never(name), (name, kind)


def test_the_sweep_refuses_the_whole_hostile_env_in_one_line_naming_file_key_and_every_name(tmp_path, script, canary):
    path = experiment_file(tmp_path, hostile_env(tmp_path, script))
    accepted = [arg for name in NAMES for arg in ("--accept-env", name)]
    proc = fabric_bench("sweep", str(path), "--dry-run", "--dir", str(tmp_path / "sweep"), *accepted, timeout=120)
    line = refusal(proc)
    first = sorted(NAMES)[0]
    assert f"{path.name}: [run.env]: environment variable {first} is not one a run may carry" in line
    assert f"(and {len(NAMES) - 1} more: " in line and all(name in line for name in NAMES), line
    assert "--accept-env cannot admit it" in line
    assert "nothing was run" not in proc.stdout and not (tmp_path / "sweep").exists() and not canary.exists()


@pytest.mark.parametrize(
    "name", ["OMPI_MCA_orte_fork_agent", "OMPI_MCA_ORTE_FORK_AGENT", "PRTE_MCA_prte_fork_agent", "LD_PRELOAD"]
)
def test_a_real_sweep_of_a_hostile_experiment_runs_nothing(tmp_path, script, canary, name):
    """Not a dry run: the attack as it was, refused before any rank, directory or job exists."""
    path = experiment_file(tmp_path, {name: str(script)})
    proc = fabric_bench("sweep", str(path), "--dir", str(tmp_path / "sweep"), "--quiet-check", "0", timeout=300)
    line = refusal(proc)
    assert f"{path.name}: [run.env]: environment variable {name} is not one a run may carry" in line
    assert not canary.exists() and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("name", ["OMPI_MCA_orte_fork_agent", "ompi_mca_orte_fork_agent", "NCCL_NET_PLUGIN"])
def test_accept_env_cannot_admit_a_never_admitted_name_but_does_admit_a_plain_one(tmp_path, name):
    path = experiment_file(tmp_path, {name: "evil", "MY_SITE_KNOB": "1"})
    sweep = ("sweep", str(path), "--dry-run", "--dir", str(tmp_path / "sweep"))
    line = refusal(fabric_bench(*sweep, "--accept-env", name, "--accept-env", "MY_SITE_KNOB", timeout=120))
    assert f"environment variable {name} is not one a run may carry" in line
    assert "--accept-env cannot admit it" in line
    # the control: without the hazard, the site's own name passes only once accepted
    plain = experiment_file(tmp_path, {"MY_SITE_KNOB": "1", "NCCL_DEBUG": "WARN"}, "plain.experiment.toml")
    sweep = ("sweep", str(plain), "--dry-run", "--dir", str(tmp_path / "plain"))
    line = refusal(fabric_bench(*sweep, timeout=120))
    assert (
        "environment variable MY_SITE_KNOB is not one a run may carry" in line and "--accept-env MY_SITE_KNOB" in line
    )
    accepted = fabric_bench(*sweep, "--accept-env", "MY_SITE_KNOB", timeout=120)
    assert accepted.returncode == 0 and "nothing was run" in accepted.stdout, accepted.stderr


def test_a_knob_in_an_experiment_file_passes_only_with_a_value_of_its_shape(tmp_path):
    assert load_experiment(experiment_file(tmp_path, {"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "2"})).env
    with pytest.raises(UsageError, match=r"NCCL_IB_GID_INDEX .*its value must be an integer"):
        load_experiment(experiment_file(tmp_path, {"NCCL_IB_GID_INDEX": "$(id)"}))
    with pytest.raises(UsageError, match="environment variable NCCL_DEBUG holds a control character"):
        load_experiment(experiment_file(tmp_path, {"NCCL_DEBUG": "WARN\nINFO"}))


def test_an_archive_with_the_same_names_is_refused_and_its_dry_run_shows_each_refusal(tmp_path, script, canary):
    env = hostile_env(tmp_path, script)
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(extra_env=env, launcher="mpirun", engine="horovod")])
    accepted = [arg for name in NAMES for arg in ("--accept-env", name)]
    out = tmp_path / "replays"
    line = refusal(fabric_bench("replay", str(archive), "--results", str(out), *accepted, timeout=120))
    assert f"environment variable {sorted(NAMES)[0]} is not one a run may carry from another site: refused" in line
    assert f"(and {len(NAMES) - 1} more: replay --dry-run lists them)" in line
    dry = fabric_bench("replay", str(archive), "--dry-run", *accepted, timeout=120)
    assert dry.returncode == 2 and dry.stderr.count("error:") == 1 and "Traceback" not in dry.stderr, dry.stderr
    for name in NAMES:
        shown = [row for row in dry.stdout.splitlines() if f"from the archive: env {name}=" in row]
        assert len(shown) == 1 and ": refused (" in shown[0] and "--accept-env cannot admit it" in shown[0], name
    assert not canary.exists() and not out.exists()


def test_every_never_admitted_class_is_tried_and_no_knob_falls_in_one():
    tried = {kind for _, kind, _ in HOSTILE}
    assert tried == set(foreign_env.NEVER)
    for name, kind, _ in HOSTILE:  # its spelling alone says its class, whatever KNOWN_HAZARDS lists
        assert foreign_env.NEVER[kind].said_by(foreign_env.canonical(name)), (name, kind)
    assert [name for name in foreign_env.KNOBS if foreign_env.never(name)] == []
    assert all(doc in foreign_env.DOCS for hazard in foreign_env.NEVER.values() for doc in hazard.docs)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("UCX_RC_VERBS_PATH_MTU", "a network path's MTU: PATH is a path only as the last word"),
        ("UCX_IB_SUBNET_PREFIX_LEN", "a length"),
        ("MY_SITE_KNOB", "a site's own name"),
    ],
)
def test_a_name_outside_every_class_still_only_needs_accept_env(name, reason):
    assert foreign_env.judge(name, "1").status == "needs-accept", reason
    assert foreign_env.judge(name, "1", [name]).status == "accepted", reason


MPIRUN = shutil.which("mpirun")
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpirun(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MPIRUN), "-np", "1", "--oversubscribe", *argv],
        env={**os.environ, **ROOT_OK, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.skipif(MPIRUN is None, reason="needs Open MPI's mpirun")
def test_the_synonyms_are_real_here_a_parameter_file_and_an_environment_list(tmp_path, script, canary):
    """What Open MPI 4.1 does with the names the gate refuses: mca_param_files (a synonym of
    mca_base_param_files) reads a file that sets the fork agent, which then runs; mca_base_env_list
    sets any variable in the rank. And what it does not: the upper-case spelling (the gate refuses
    every spelling anyway: another release or library may read it)."""
    params = tmp_path / "params.conf"
    params.write_text(f"orte_fork_agent = {script}\n")
    assert mpirun({"OMPI_MCA_mca_param_files": str(params)}, "true").returncode == 0
    assert canary.exists()
    canary.unlink()
    listed = mpirun({"OMPI_MCA_mca_base_env_list": "INJECTED_BY_LIST=yes"}, "env")
    assert "INJECTED_BY_LIST=yes" in listed.stdout.splitlines()
    assert mpirun({"OMPI_MCA_ORTE_FORK_AGENT": str(script)}, "true").returncode == 0
    assert not canary.exists()
    for name in ("OMPI_MCA_mca_param_files", "OMPI_MCA_mca_base_env_list", "OMPI_MCA_ORTE_FORK_AGENT"):
        assert foreign_env.judge(name, "x", [name]).status == "refused"
