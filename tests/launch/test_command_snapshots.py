"""argv/env snapshots for every runtime x launcher x fabric: the launch contract.

The snapshot file was reviewed by eye; a change to any argv or env shows up
here as a diff. Regenerate deliberately with FABRIC_BENCH_UPDATE_SNAPSHOTS=1.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launch.errors import UsageError

from launch.ranks import launchers
from launch.site import fabric_preset
from launch.runs.run import make_plan
from launch.ranks.launchers import build_command, sbatch_script
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import RUNTIMES
from launch.site.config import FabricSite, Site

SNAPSHOTS = Path(__file__).parent / "snapshots" / "commands.json"
RUN_DIR = Path("/results/RUN")
SITE = Site(
    fabrics={
        "ethernet": FabricSite(interface="eth0"),
        "infiniband": FabricSite(interface="ib0", device="mlx5_0"),
        "omnipath": FabricSite(interface="ib0", device="hfi1_0"),
        "efa": FabricSite(interface="ens5", device="rdmap16s27"),
        "slingshot": FabricSite(
            interface="hsn0",
            device="cxi0",
            host_paths=(
                ("host_libfabric", "/opt/cray/libfabric/1.15.2.0/lib64"),
                ("host_libcxi", "/usr/lib64/libcxi.so.1"),
            ),
        ),
        "universal": FabricSite(interface="eth0"),
    }
)
FABRICS = [None, "ethernet", "infiniband", "omnipath", "efa", "slingshot"]
LAUNCHERS = ["local", "mpirun", "srun", "sbatch"]


def case(runtime, launcher, fabric):
    gpus = fabric not in (None, "ethernet")
    return RunSpec(
        engine="horovod",
        model="resnet50",
        ranks=2 if launcher == "local" else 4,
        nodes=1 if launcher == "local" else 2,
        runtime=runtime,
        launcher=launcher,
        image=None if runtime == "host" else {"podman": "localhost/fabric-bench:cuda"}.get(runtime, "/img/fb.sif"),
        fabric=fabric,
        gpus_per_node=4 if gpus else 0,
        allreduce="nccl" if gpus else None,
        gpudirect="on" if gpus else None,
        partition="gpu",
        time_limit="00:30:00",
    ).validated()


def render(spec):
    plan, _ = make_plan(spec, RUN_DIR, SITE)
    command = build_command(spec, plan)
    rendered = {"argv": command.argv, "env": command.env}
    if spec.launcher == "sbatch":
        rendered["script"] = sbatch_script(spec, plan)
    # ensure_ascii=False: escaped, a Python under a non-ASCII path would not match sys.executable;
    # the job script shell-quotes it where the path holds a space
    text = json.dumps(rendered, sort_keys=True, ensure_ascii=False)
    for python in (shlex.quote(sys.executable), sys.executable):
        text = text.replace(json.dumps(python, ensure_ascii=False)[1:-1], "<python>")
    return json.loads(text)


@pytest.fixture
def host_independent(monkeypatch):
    """The same snapshot on any host: fixed CPU count (no Slurm asked for its nodes'), non-root,
    every fabric path present, and a kernel older than 5.13 (EFA's fork-safety variables set:
    launch.site.fabric_preset)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(launchers.slurm, "node_cpus", lambda partition: None)
    monkeypatch.setattr(fabric_preset, "kernel_release", lambda: "5.10.0-28-amd64")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(fabric_preset.glob, "glob", lambda pattern: [pattern.replace("*", "0")])
    monkeypatch.setattr(launchers, "tool_path", lambda name: name)


def all_cases():
    return {f"{r}/{l}/{f}": (r, l, f) for r in RUNTIMES for l in LAUNCHERS for f in FABRICS}


def test_commands_match_the_reviewed_snapshots(host_independent):
    rendered = {key: render(case(*args)) for key, args in all_cases().items()}
    if os.environ.get("FABRIC_BENCH_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.write_text(json.dumps(rendered, indent=1, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOTS.read_text())
    assert sorted(rendered) == sorted(expected)
    for key in rendered:
        assert rendered[key] == expected[key], key


def test_snapshots_hold_the_fabric_selection(host_independent):
    """Spot checks of the contract, readable without the snapshot file."""
    ib = render(case("apptainer", "mpirun", "infiniband"))
    argv = ib["argv"]
    assert argv[:3] == ["mpirun", "-np", "4"] and "--nv" in argv
    inside = argv[argv.index("env", argv.index("--nv")) :]  # set by `env` in the image, never --env
    assert "--env" not in argv and "NCCL_IB_HCA==mlx5_0" in inside and "OMPI_MCA_pml=ucx" in inside
    assert "/dev/infiniband:/dev/infiniband" in argv and ib["env"]["NCCL_NET_GDR_LEVEL"] == "PHB"
    eth = render(case("host", "srun", "ethernet"))
    # the ranks' step is named after the run: the per-node samplers find its job by it
    assert eth["argv"][:3] == ["srun", "--job-name=fabric-bench-RUN", "--mpi=pmix"] and "NCCL_NET" not in eth["env"]
    assert eth["env"]["OMPI_MCA_btl_tcp_if_include"] == "eth0"
    sling = render(case("podman", "sbatch", "slingshot"))
    assert "/opt/cray/libfabric/1.15.2.0/lib64:/opt/host/libfabric" in sling["script"]
    assert "export FI_PROVIDER=cxi" in sling["script"]
    # each rank's CPU share is counted on the node the job runs on, over whole nodes
    assert "#SBATCH --exclusive" in sling["script"] and "export SRUN_CPUS_PER_TASK=$cpus_per_rank" in sling["script"]
    assert "--cpus-per-task" not in sling["script"] and "OMP_NUM_THREADS=4" not in sling["script"]
    assert any(a.startswith("--cpus-per-task=") for a in eth["argv"])
    assert "export PMIX_MCA_gds=hash" in sling["script"] and "PMIX_MCA_gds" not in eth["env"]  # containers only


def test_every_job_script_is_valid_bash(host_independent, tmp_path):
    for key, (runtime, launcher, fabric) in all_cases().items():
        if launcher != "sbatch":
            continue
        script = tmp_path / "job.sbatch"
        script.write_text(render(case(runtime, launcher, fabric))["script"])
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, (key, check.stderr)


def test_hostile_values_stay_quoted_in_job_scripts(host_independent, tmp_path):
    with pytest.raises(UsageError, match="is refused: a Slurm name"):
        RunSpec(launcher="sbatch", partition="x; touch /tmp/pwned").validated()
    spec = RunSpec(launcher="sbatch", partition="gpu", extra_env={"A": "$(reboot) 'q'"}).validated()
    plan, _ = make_plan(spec, RUN_DIR, SITE)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(spec, plan))
    # execute only the export lines: the value must arrive verbatim
    exports = [line for line in script.read_text().splitlines() if line.startswith("export A=")]
    out = subprocess.run(["bash", "-c", exports[0] + '; printf %s "$A"'], capture_output=True, text=True)
    assert out.stdout == "$(reboot) 'q'"
    assert "#SBATCH --partition=gpu\n" in script.read_text()
