"""A real Slurm (slurmctld + slurmd on this host, started by the test): the PyTorch
benchmark as a 2-task job through `srun --mpi=pmix`, submitted by sbatch, run
inside salloc. A whole sweep as one job runs on the emulated Slurm cluster, across its nodes
(tests/integration/test_emulated_slurm.py)."""

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
    assert r["argv"][1:3] == ["-m", "launch.fleet.sbatch_wait"]  # sbatch, followed once a second
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
