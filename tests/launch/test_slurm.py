"""Slurm helpers: one time-limit format both ways, one #SBATCH header for every job script."""

from pathlib import Path

import pytest

from launch import shapes
from launch.errors import UsageError
from launch.fleet import slurm


@pytest.mark.parametrize(
    "value, text",
    [(1, "00:01:00"), (90, "01:30:00"), (1440, "1-00:00:00"), ("1530", "1-01:30:00"), ("1-01:30", "1-01:30:00")],
)
def test_a_time_limit_is_written_anew_in_slurm_s_clock_form(value, text):
    assert shapes.slurm_time("--time", value) == text


@pytest.mark.parametrize("value", ["1:2:3:4", "00:61:00", "-5", 0, -3, True, None, 1.5, "abc", "１０", "10 ", "367-00"])
def test_a_malformed_time_limit_is_refused(value):
    with pytest.raises(UsageError, match="is refused: a Slurm time"):
        shapes.slurm_time("--time", value)


@pytest.mark.parametrize("seconds, minutes", [(0, 1), (1, 1), (60, 1), (61, 2), (3600.5, 61)])
def test_minutes_cover_the_seconds(seconds, minutes):
    assert slurm.minutes_for(seconds) == minutes


def job_script(**values) -> list[str]:
    return slurm.job_script(announce="a job", body=[], **values).splitlines()


def test_job_header_writes_shaped_values_bare_and_omits_what_is_unset():
    request = slurm.Request.parsed(partition="gpu", time="10")
    lines = job_script(
        name=slurm.job_name("x"),
        nodes=2,
        tasks_per_node=4,
        output=shapes.slurm_log("output", "/r s"),
        partition=request.partition,
        time=request.time,
        env={"A": "b c"},
    )
    assert lines[0] == "#!/bin/bash" and "export A='b c'" in lines
    assert "#SBATCH --job-name=fabric-bench-x" in lines
    assert "#SBATCH --partition=gpu" in lines
    assert '#SBATCH --output="/r s/slurm-%j.out"' in lines and "#SBATCH --time=00:10:00" in lines
    assert not any("--account" in line or "--gpus-per-node" in line for line in lines)
    eight = job_script(
        name=slurm.job_name("n"), nodes=1, tasks_per_node=8, output=shapes.slurm_log("o", "/o"), gpus_per_node=8
    )
    assert "#SBATCH --gpus-per-node=8" in eight


def test_site_modules_are_loaded_by_run_and_sweep_job_scripts(tmp_path):
    from launch.runs.run import prepare
    from launch.ranks.runspec import RunSpec
    from launch.site.config import Site

    site = Site(modules=(shapes.module_name("m", "openmpi/4.1.6"), shapes.module_name("m", "cuda/12.4")))
    spec = RunSpec(launcher="sbatch", ranks=2, nodes=1)
    script = prepare(spec, tmp_path, site, run_id="r").job_script
    assert "module load openmpi/4.1.6\nmodule load cuda/12.4\nset -euo pipefail" in script
    sweep_script = slurm.sweep_job_script(
        name=slurm.job_name("s"),
        nodes=1,
        tasks_per_node=1,
        gpus_per_node=0,
        minutes=5,
        output=shapes.slurm_log("o", tmp_path),
        request=slurm.Request(),
        argv=["x"],
        modules=site.modules,
    )
    assert "module load cuda/12.4\nset -euo pipefail" in sweep_script and "#SBATCH --time=00:05:00" in sweep_script
    assert "module load" not in prepare(spec, tmp_path, Site(), run_id="r2").job_script


JOB_STATES = Path(__file__).parent.parent / "data" / "slurm_job_states"


def scontrol_answers(monkeypatch, *states: str) -> list[list[str]]:
    """Slurm answers `scontrol show job` with the recorded lines of tests/data/slurm_job_states,
    one per query in order (the last repeated); returns the queries made."""
    lines = [(JOB_STATES / f"{state}.txt").read_text() for state in states]
    asked: list[list[str]] = []

    def query(argv):
        asked.append(argv)
        return lines[min(len(asked), len(lines)) - 1]

    monkeypatch.setattr(slurm, "_query", query)
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    return asked


def test_a_completing_job_is_read_once_it_has_completed(monkeypatch):
    asked = scontrol_answers(monkeypatch, "completing", "completing", "completed")
    fields = slurm.settled_job_fields("11")
    assert fields["JobState"] == "COMPLETED" and fields["NodeList"] == "n[0-3]"
    assert asked == [["scontrol", "show", "job", "-o", "11"]] * 3


def test_a_job_still_completing_records_no_node_list(monkeypatch):
    # its NodeList then names only the nodes still completing: not the job's nodes
    scontrol_answers(monkeypatch, "completing")
    fields = slurm.settled_job_fields("11", wait_s=0.05)
    assert fields["JobState"] == "COMPLETING" and "NodeList" not in fields and fields["NumNodes"] == "4"
    monkeypatch.setattr(slurm, "SETTLE_S", 0.05)
    out = slurm.step_facts([{"slurm_step": "11.0", "host": "n0"}, {"slurm_step": "11.0", "host": "n1"}], {})
    assert out["job_id"] == "11" and out["nodes"] is None and out["num_nodes"] == 4
    assert out["job_state"] == "COMPLETING" and out["rank_hosts"] == ["n0", "n1"]
