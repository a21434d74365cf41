"""Another site's environment passes by exact name with a value of its shape (issue 41).

The attack that opened it: an archive setting one Open MPI variable on none of the old
lists (OMPI_MCA_orte_fork_agent) made replay run the archive's script in front of every
rank, as root. These tests try one variable per library and per class (starts a
program, loads a library, reads a file that sets others, writes a file where it says),
show that the class is real on this machine's Open MPI, and check that every variable the
bundle itself sets passes with its real values.
"""

import json
import os
import subprocess

import pytest

from launch import foreign_env
from launch.errors import UsageError
from launch.trust import check_foreign_env
from tests.conftest import fabric_bench
from tests.launch.test_command_snapshots import RUN_DIR, SNAPSHOTS
from tests.security.conftest import hostile_result, write_archive

# library -> (variable, class, value an attacker would give it); the classes found, per library
HAZARDS = {
    "Open MPI": [
        ("OMPI_MCA_orte_fork_agent", "program", "{script}"),
        ("OMPI_MCA_prte_fork_agent", "program", "{script}"),
        ("OMPI_MCA_plm_rsh_agent", "program", "{script}"),
        ("OMPI_MCA_mca_base_component_path", "library", "{dir}"),
        ("OMPI_MCA_mca_base_param_files", "reads settings", "{dir}/params.conf"),
        ("OMPI_MCA_orte_output_filename", "writes", "{dir}/out"),
    ],
    "PMIx": [
        ("PMIX_MCA_mca_base_component_path", "library", "{dir}"),
        ("PMIX_MCA_mca_base_param_files", "reads settings", "{dir}/p.conf"),
    ],
    "UCX": [
        ("UCX_GDB_COMMAND", "program", "{script}"),
        ("UCX_MODULE_DIR", "library", "{dir}"),
        ("UCX_LOG_FILE", "writes", "{dir}/ucx.log"),
        ("UCX_STATS_DEST", "writes", "file:{dir}/stats"),
    ],
    "libfabric": [("FI_PROVIDER_PATH", "library", "{dir}"), ("FI_HOOK", "library", "ofi_hook_trace")],
    "NCCL": [
        ("NCCL_NET_PLUGIN", "library", "{dir}/libnccl-net.so"),
        ("NCCL_TUNER_PLUGIN", "library", "evil"),
        ("NCCL_CONF_FILE", "reads settings", "{dir}/nccl.conf"),
        ("NCCL_DEBUG_FILE", "writes", "{dir}/%h.log"),
        ("NCCL_TOPO_DUMP_FILE", "writes", "{dir}/topo.xml"),
    ],
    "Horovod": [
        ("HOROVOD_TIMELINE", "writes", "{dir}/timeline.json"),
        ("HOROVOD_AUTOTUNE_LOG", "writes", "{dir}/autotune.csv"),
        ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "program", "10.9.9.9"),
    ],
    "TensorFlow": [
        ("TF_XLA_FLAGS", "writes", "--xla_dump_to={dir}"),
        ("TF_CONFIG", "program", "{{}}"),
        ("TF_DUMP_GRAPH_PREFIX", "writes", "{dir}"),
    ],
    "CUDA": [("CUDA_INJECTION64_PATH", "library", "{dir}/inject.so"), ("CUDA_CACHE_PATH", "writes", "{dir}")],
    "C and Python runtimes": [
        ("LD_PRELOAD", "library", "{dir}/x.so"),
        ("LD_AUDIT", "library", "{dir}/a.so"),
        ("PYTHONPATH", "library", "{dir}"),
        ("PYTHONWARNINGS", "program", "ignore::0:os.system"),
        ("BASH_ENV", "program", "{script}"),
        ("PATH", "program", "{dir}"),
    ],
}
HAZARD_CASES = [(library, *case) for library, cases in HAZARDS.items() for case in cases]


@pytest.mark.parametrize("library, name, kind, value", HAZARD_CASES, ids=[c[1] for c in HAZARD_CASES])
def test_every_hazard_class_is_refused_and_accept_env_cannot_admit_it(tmp_path, script, library, name, kind, value):
    value = value.format(script=script, dir=tmp_path)
    for accepted in ((), (name,)):
        verdict = foreign_env.judge(name, value, accepted)
        assert verdict.status == "refused", (library, kind, verdict)
        with pytest.raises(UsageError, match=f"environment variable {name} is not one a run may carry"):
            check_foreign_env({name: value}, accepted)


@pytest.mark.parametrize(
    "name",
    [
        "OMPI_MCA_orte_fork_agent",
        "UCX_GDB_COMMAND",
        "FI_PROVIDER_PATH",
        "NCCL_NET_PLUGIN",
        "HOROVOD_TIMELINE",
        "PMIX_MCA_mca_base_component_path",
        "TF_XLA_FLAGS",
        "CUDA_INJECTION64_PATH",
        "LD_PRELOAD",
    ],
)
def test_replay_refuses_one_variable_per_library_before_anything_runs(tmp_path, script, canary, name):
    value = {"TF_XLA_FLAGS": f"--xla_dump_to={tmp_path}"}.get(name, str(script))
    archive = write_archive(
        tmp_path / "a.tar.gz", [hostile_result(extra_env={name: value}, launcher="mpirun", engine="horovod")]
    )
    out = tmp_path / "replays"
    proc = fabric_bench("replay", str(archive), "--results", str(out), "--accept-env", name)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"environment variable {name} is not one a run may carry from another site: refused" in proc.stderr
    assert "--accept-env cannot admit it" in proc.stderr and "Traceback" not in proc.stderr
    assert not canary.exists() and not out.exists()


def test_the_fork_agent_class_is_real_here_open_mpi_runs_it_in_front_of_every_rank(tmp_path, script, canary):
    """Why the allow-list exists: this machine's mpirun honours the variable the attack used."""
    env = {
        **os.environ,
        "OMPI_MCA_orte_fork_agent": str(script),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    proc = subprocess.run(
        ["mpirun", "-np", "1", "--oversubscribe", "true"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert canary.exists()  # the payload ran; replay refuses this name above


@pytest.mark.parametrize(
    "value",
    ["/tmp/x", "../x", "x/y", "$(touch x)", "`id`", "a b", "x;id", "~/x", "lib.so/", "file:/etc/passwd", "-e x"],
)
def test_no_knob_admits_a_value_that_names_a_path_or_shell_text(value):
    admitted = [name for name, knob in foreign_env.KNOBS.items() if knob.shape.fits(value)]
    assert admitted == []


@pytest.mark.parametrize(
    "name, value",
    [
        ("NCCL_IB_GID_INDEX", "3"),
        ("NCCL_IB_GID_INDEX", "x"),
        ("NCCL_NET_GDR_LEVEL", "PHB"),
        ("NCCL_NET_GDR_LEVEL", "2"),
        ("NCCL_NET_GDR_LEVEL", "7"),
        ("UCX_TLS", "^tcp"),
        ("UCX_TLS", "rc,bogus"),
        ("OMPI_MCA_btl", "self,vader,tcp"),
        ("OMPI_MCA_btl", "self,evil"),
        ("OMP_NUM_THREADS", "8"),
        ("OMP_NUM_THREADS", "8 9"),
        ("FI_PROVIDER", "verbs;ofi_rxm"),
        ("FI_PROVIDER", "evil"),
        ("CUDA_VISIBLE_DEVICES", "0,1,GPU-8c5b5f4e-1f1a-4a77-a1c5-6a4b0e1c3d2e"),
        ("HOROVOD_CYCLE_TIME", "0.5"),
        ("HOROVOD_CYCLE_TIME", "1e9"),
        ("NCCL_SOCKET_IFNAME", "=eth0"),
        ("NCCL_SOCKET_IFNAME", "^lo,docker0"),
        ("OMPI_MCA_btl_tcp_if_include", "10.0.0.0/8"),
        ("NCCL_BUFFSIZE", "4194304"),
        ("NCCL_BUFFSIZE", "-1"),
    ],
)
def test_a_knob_takes_only_values_of_its_shape(name, value):
    expected = {"x", "7", "rc,bogus", "self,evil", "8 9", "evil", "1e9", "-1"}
    assert foreign_env.judge(name, value).passes is (value not in expected)


def test_an_unknown_name_needs_accept_env_and_then_still_no_path():
    assert foreign_env.judge("MY_SITE_KNOB", "1").status == "needs-accept"
    assert foreign_env.judge("MY_SITE_KNOB", "1", ["MY_SITE_KNOB"]).status == "accepted"
    assert foreign_env.judge("MY_SITE_KNOB", "/opt/x", ["MY_SITE_KNOB"]).status == "refused"
    # a knob outside its shape may be accepted by name, never into a path
    assert foreign_env.judge("NCCL_ALGO", "NewAlgo", ["NCCL_ALGO"]).status == "accepted"
    assert foreign_env.judge("NCCL_ALGO", "/x", ["NCCL_ALGO"]).status == "refused"
    # a name of a future release that by its ending names a file is refused outright
    assert foreign_env.judge("NCCL_FUTURE_DUMP_FILE", "x", ["NCCL_FUTURE_DUMP_FILE"]).status == "refused"


def test_every_variable_the_bundle_sets_passes_with_its_real_values():
    """The launch contract's snapshots: every runtime x launcher x fabric's rank environment, as a
    replayed archive would carry it back (presets, launchers, reporting, engines)."""
    commands = json.loads(SNAPSHOTS.read_text())
    seen = {}
    for rendered in commands.values():
        seen.update(rendered["env"])
    assert len(seen) > 30  # the snapshots really hold every fabric's preset
    for name in foreign_env.BUNDLE_PLACED:  # files the bundle places itself: under the run directory
        assert seen.pop(name).startswith(str(RUN_DIR) + "/")
    failing = [verdict.line() for verdict in foreign_env.judge_all(seen) if not verdict.passes]
    assert failing == []


def test_every_preset_variable_of_every_fabric_is_a_knob():
    from containers.fabrics import PROFILES

    for profile in PROFILES.values():
        chosen = (*profile.gpudirect_env.values(), *profile.mpi_gpu_env.values())
        names = {*profile.env, *profile.nccl_env, *(n for env in chosen for n in env)}
        assert names <= set(foreign_env.KNOBS), (profile.name, names - set(foreign_env.KNOBS))


def test_no_knob_is_also_a_hazard_and_every_knob_is_documented():
    assert set(foreign_env.KNOBS).isdisjoint(foreign_env.KNOWN_HAZARDS)
    assert all(knob.doc in foreign_env.DOCS for knob in foreign_env.KNOBS.values())


def test_the_dry_run_shows_each_variable_with_its_verdict_then_refuses_in_one_line(tmp_path, canary):
    env = {
        "NCCL_DEBUG": "INFO",
        "OMPI_MCA_orte_fork_agent": "/tmp/payload.sh",
        "NCCL_IB_GID_INDEX": "x",
        "MY_SITE_KNOB": "1",
    }
    archive = write_archive(tmp_path / "a.tar.gz", [hostile_result(extra_env=env, launcher="mpirun")])
    proc = fabric_bench("replay", str(archive), "--dry-run")
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1, proc.stderr
    lines = [line.strip() for line in proc.stdout.splitlines() if "from the archive: env " in line]
    verdicts = {line.split("=", 1)[0].rsplit(" ", 1)[1]: line.split(": ", 2)[2] for line in lines}
    assert verdicts["NCCL_DEBUG"].startswith("allowed by name (documented in NCCL")
    assert verdicts["OMPI_MCA_orte_fork_agent"].startswith("refused (runs a program in front of every rank")
    assert verdicts["NCCL_IB_GID_INDEX"].startswith("refused (its value must be an integer")
    assert verdicts["MY_SITE_KNOB"].startswith("needs --accept-env")
    assert "environment variable MY_SITE_KNOB is not one a run may carry" in proc.stderr  # the first failing, sorted
    assert "(and 2 more: replay --dry-run lists them)" in proc.stderr
    accepted = fabric_bench("replay", str(archive), "--dry-run", "--accept-env", "MY_SITE_KNOB")
    assert "env MY_SITE_KNOB=1: accepted by --accept-env" in accepted.stdout and accepted.returncode == 2
    assert not canary.exists()
