"""A real Slurm (slurmctld + slurmd on this host, started by the test): the PyTorch
benchmark as a 2-task job through `srun --mpi=pmix`, submitted by sbatch, run
inside salloc, and a whole sweep as one job."""

import json
import subprocess

import pytest

from tests import slurm_cluster
from tests.results import only_result
from tests.conftest import REPO, VENV_BIN, fabric_bench, need

pytestmark = pytest.mark.slow
TINY = [
    "--engine",
    "ddp",
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--iters",
    "2",
    "--batches-per-iter",
    "2",
    "--runtime",
    "host",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    need(slurm_cluster.available(), "Slurm is not installed (apt-get install slurm-wlm; make setup-test)")
    with slurm_cluster.SlurmCluster(tmp_path_factory.mktemp("slurm")) as running:
        yield running


def assert_valid_two_rank_result(r: dict, cluster) -> None:
    assert r["status"] == "ok", r.get("reason")
    assert r["world_size"] == 2 and r["params_max_abs_diff"] == 0.0 and len(r["params_sha256"]) == 1
    assert r["throughput"]["total_img_per_s"] > 0
    slurm = r["slurm"]
    assert slurm["job_id"] and slurm["job_id"].isdigit()
    assert slurm["nodes"] == cluster.host and slurm["version"].startswith(("22.", "23.", "24.", "25."))


def test_sbatch_job_runs_two_ranks_through_srun_pmix(cluster, tmp_path):
    proc = fabric_bench(
        "run",
        "--launcher",
        "sbatch",
        "--ranks",
        "2",
        *TINY,
        "--time-limit",
        "5",
        "--results",
        str(tmp_path),
        env=cluster.env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:] + cluster.logs()
    r = only_result(tmp_path)
    assert_valid_two_rank_result(r, cluster)
    assert r["slurm"]["job_state"] in ("COMPLETED", None)
    assert r["argv"][:3] == ["sbatch", "--wait", "--parsable"]
    script = (tmp_path / r["run_id"] / "job.sbatch").read_text()
    assert f"srun --job-name=fabric-bench-{r['run_id']} --mpi=pmix --nodes=1 --ntasks=2" in script
    # the job's one node sampled on its own, by a step attached to the job
    assert list(r["disturbance"]["nodes"]) == r["slurm"]["rank_hosts"][:1], r["disturbance"]["sampler"]
    # whole nodes, each rank's CPU share counted on the node the job ran on (issue 29, item 6)
    assert "#SBATCH --exclusive" in script and "export SRUN_CPUS_PER_TASK=$cpus_per_rank" in script


def test_srun_inside_an_allocation(cluster, tmp_path):
    argv = [
        "salloc",
        "--ntasks=2",
        "--time=5",
        str(VENV_BIN / "fabric-bench"),
        "run",
        "--launcher",
        "srun",
        "--ranks",
        "2",
        *TINY,
        "--results",
        str(tmp_path),
    ]
    proc = subprocess.run(argv, cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    r = only_result(tmp_path)
    assert_valid_two_rank_result(r, cluster)
    assert r["argv"][0] == "srun" and "--mpi=pmix" in r["argv"]


def test_a_whole_sweep_as_one_job(cluster, tmp_path):
    experiment = tmp_path / "one.experiment.toml"
    experiment.write_text("""
[experiment]
name = "one-job"
time_limit_s = 240
[matrix]
ranks_per_node = [2]
[run]
model = "resnet18"
image_size = 32
batch_size = 8
warmup = 1
iters = 2
batches_per_iter = 2
launcher = "sbatch"
runtime = "host"
""")
    directory = tmp_path / "sweep"
    proc = fabric_bench(
        "sweep",
        str(experiment),
        "--dir",
        str(directory),
        "--one-job",
        "--remeasure-disturbed",
        "0",
        env=cluster.env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["ok"] == 2 and summary["ran"] == 2
    jobs = {row["slurm"]["job_id"] for row in summary["runs"]}
    assert len(jobs) == 1  # both runs were steps of the one job
    two = next(row for row in summary["runs"] if not row["baseline"])
    assert_valid_two_rank_result(json.loads((directory / two["result"]).read_text()), cluster)
    assert two["scaling_efficiency"] > 0


def test_inside_the_apptainer_cpu_image(cluster, cpu_ethernet_image, tmp_path):
    image = {"image": cpu_ethernet_image.image}
    proc = fabric_bench(
        "run",
        "--launcher",
        "sbatch",
        "--ranks",
        "2",
        *TINY[:-2],
        "--runtime",
        "apptainer",
        "--image",
        image["image"],
        "--fabric",
        "ethernet",
        "--results",
        str(tmp_path),
        "--timeout",
        "300",
        env=cluster.env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = only_result(tmp_path)
    assert_valid_two_rank_result(result, cluster)
    pmix = next(c for c in result["preflight"]["checks"] if c["check"].startswith("PMIx"))
    assert pmix["verdict"] == "ok" and pmix["host"] == "pmix_v4" and pmix["image"].startswith("4."), pmix
