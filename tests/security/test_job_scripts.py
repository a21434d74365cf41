"""Job scripts cannot be broken out of: whatever an experiment or archive puts in a field, the
rendered script holds only the intended commands (issue 28)."""

import shlex
import subprocess

import pytest

from launch import shapes
from launch.fleet import slurm
from launch.errors import UsageError
from launch.ranks.launchers import sbatch_script
from launch.runs.run import make_plan
from launch.ranks.runspec import RunSpec
from launch.site.config import FabricSite, Site
from tests.conftest import REPO, fabric_bench

REPO_EXPERIMENT = REPO / "experiments" / "cpu-small.experiment.toml"

# printable but shell-active: each must arrive as data
NASTY = "x'\"$(touch /tmp/pwned)`id`;|&<>*?{a,b}\\ #"


def commands_of(script: str) -> list[str]:
    """The script's commands as bash itself sees them: comments and #SBATCH lines dropped,
    each line split into words by shlex (the script is one command per line by construction)."""
    return [line for line in script.splitlines() if line.strip() and not line.startswith("#")]


def test_hostile_printable_values_of_every_field_stay_data(tmp_path):
    spec = RunSpec(
        launcher="sbatch",
        runtime="apptainer",
        image="/images/x.sif",  # a shape, as the hostfile: NASTY is refused there (tests/security/test_argv_sinks.py)
        partition="gpu",
        account="proj-42",
        time_limit="10",
        hostfile="/h/hosts",
        fabric="ethernet",
        nodes=2,
        ranks=4,
        extra_env={"NCCL_DEBUG": NASTY, "UCX_TLS": NASTY},
        benchmark="halo",
        model=NASTY,
    ).validated()
    site = Site(fabrics={"ethernet": FabricSite(interface="eth0")}, modules=(NASTY,))
    plan, _ = make_plan(spec, tmp_path / "RUN", site)
    script = sbatch_script(spec, plan)
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    allowed_heads = {"module", "set", "echo", "export", "cpus_per_rank=$((", "((", "srun"}
    for line in commands_of(script):
        words = shlex.split(line)
        assert words[0] in allowed_heads or words[0].startswith("cpus_per_rank="), line
        if words[0] == "export":  # one assignment, a valid name
            assert len(words) == 2 and words[1].split("=", 1)[0].isidentifier(), line
    # every #SBATCH line is one option whose value is quoted whole
    for line in script.splitlines():
        if line.startswith("#SBATCH"):
            assert len(shlex.split(line[len("#SBATCH") :])) == 1, line
    # run the exports alone: the values arrive verbatim, and nothing ran
    exports = "\n".join(l for l in script.splitlines() if l.startswith("export NCCL_DEBUG="))
    out = subprocess.run(["bash", "-c", exports + '\nprintf %s "$NCCL_DEBUG"'], capture_output=True, text=True)
    assert out.stdout == NASTY


@pytest.mark.parametrize(
    "parse",
    [
        lambda v: slurm.Request.parsed(partition=v),
        lambda v: slurm.Request.parsed(account=v),
        lambda v: slurm.Request.parsed(time=v),
        lambda v: slurm.Request.parsed(exclude=v),
        lambda v: slurm.job_name(v),
        lambda v: shapes.slurm_log("output", v),
        lambda v: shapes.module_name("modules", v),
    ],
    ids=["partition", "account", "time", "exclude", "name", "output", "module"],
)
@pytest.mark.parametrize("bad", ["a\nrm -rf ~", NASTY, '\\\'" --bogusopt "'])
def test_every_value_of_a_job_script_header_is_refused_outside_its_shape(parse, bad):
    with pytest.raises(UsageError, match="is refused"):
        parse(bad)


def test_a_job_script_refuses_a_line_break_in_an_environment_value():
    with pytest.raises(UsageError, match="holds a control character"):
        slurm.job_script(
            name=slurm.job_name("n"),
            nodes=1,
            tasks_per_node=1,
            output=shapes.slurm_log("output", "/o"),
            announce="a job",
            body=[],
            env={"NCCL_DEBUG": "a\nrm -rf ~"},
        )


def test_an_experiment_file_cannot_inject_through_run_fields(tmp_path):
    experiment = tmp_path / "e.experiment.toml"
    experiment.write_text(
        '[experiment]\nname = "x"\n[matrix]\nnodes = [1]\n[run]\nlauncher = "sbatch"\n'
        'partition = "gpu\\ntouch /tmp/pwned"\n'
    )
    proc = fabric_bench("sweep", str(experiment), "--dry-run", "--dir", str(tmp_path / "s"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "partition" in proc.stderr and "control character" in proc.stderr


@pytest.mark.parametrize("key", ["partition", "account", "time_limit"])
def test_the_slurm_tokenizer_attack_is_refused_from_an_experiment_and_a_site_file(tmp_path, key):
    """A value that closes sbatch's quoting (backslash, quote, double quote) and adds options:
    refused by its shape from the experiment's [run] and the site file's [scheduler] alike."""
    attack = '\\\\\'\\" --export=ALL,BASH_ENV=/tmp/x \\"'  # TOML for: \'" --export=... "
    experiment = tmp_path / "e.experiment.toml"
    run_key = "exclude_nodes" if key == "time_limit" else key  # an experiment's time comes from time_limit_s
    experiment.write_text(
        f'[experiment]\nname = "x"\n[matrix]\nnodes = [1]\n[run]\nlauncher = "sbatch"\n{run_key} = "{attack}"\n'
    )
    proc = fabric_bench("sweep", str(experiment), "--dry-run", "--dir", str(tmp_path / "s"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "is refused" in proc.stderr and not (tmp_path / "s").exists()
    site = tmp_path / "site.toml"
    site.write_text(f'launcher = "sbatch"\n[scheduler]\n{key} = "{attack}"\n')
    proc = fabric_bench("sweep", str(REPO_EXPERIMENT), "--site", str(site), "--dry-run", "--dir", str(tmp_path / "t"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"[scheduler].{key}" in proc.stderr and "is refused" in proc.stderr


@pytest.mark.parametrize("field", ["image", "hostfile"])
def test_an_image_or_hostfile_that_a_tool_would_read_as_an_option_is_refused(field):
    with pytest.raises(UsageError, match="would read it as an option"):
        RunSpec(**{"runtime": "apptainer", "image": "/i.sif", field: "--bind=/:/mnt"}).validated()
