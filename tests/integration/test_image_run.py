"""The issue's promise, for real: the 2-rank PyTorch benchmark inside the Apptainer
cpu image over the ethernet fabric, started by host mpirun (one container per
rank), with one `fabric-bench run` line."""

import json

import pytest

from tests.conftest import fabric_bench

pytestmark = pytest.mark.slow
TINY = [
    "--model",
    "resnet18",
    "--image-size",
    "32",
    "--batch-size",
    "8",
    "--warmup",
    "1",
    "--iters",
    "3",
    "--batches-per-iter",
    "2",
]


@pytest.mark.parametrize("engine", ["horovod", "ddp"])
def test_two_ranks_in_the_image_over_ethernet_with_host_mpirun(engine, cpu_ethernet_image, tmp_path):
    proc = fabric_bench(
        "run",
        "--runtime",
        "apptainer",
        "--image",
        cpu_ethernet_image.image,
        "--launcher",
        "mpirun",
        "--fabric",
        "ethernet",
        "--engine",
        engine,
        "--ranks",
        "2",
        *TINY,
        "--results",
        str(tmp_path),
        "--timeout",
        "300",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (path,) = tmp_path.glob("*/result.json")
    r = json.loads(path.read_text())
    assert r["status"] == "ok" and r["params_max_abs_diff"] == 0.0
    assert r["argv"][0].endswith("mpirun") and "apptainer" in r["argv"] and cpu_ethernet_image.image in r["argv"]
    assert r["image"]["digest"] == "sha256:" + cpu_ethernet_image.sha256.removeprefix("sha256:")
    assert r["env"]["OMPI_MCA_pml"] == "ob1" and r["env"]["FI_PROVIDER"] == "tcp"
    assert any("built for fabric ethernet" in check for check in r["launch"]["preflight"])
    # the ranks ran the image's Python stack, not the host's venv
    assert r["versions"]["torch"].startswith("2.") and r["launch"]["first_rank_start_seconds"] > 0


def test_an_image_built_for_another_fabric_is_refused(cpu_ethernet_image, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[fabrics.infiniband]\ninterface = "ib0"\nhca = "mlx5_0"\n')
    proc = fabric_bench(
        "run",
        "--site",
        str(site),
        "--runtime",
        "apptainer",
        "--image",
        cpu_ethernet_image.image,
        "--launcher",
        "mpirun",
        "--fabric",
        "infiniband",
        "--results",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "built for fabric 'ethernet', not 'infiniband'" in proc.stderr


def test_multi_rail_values_arrive_whole_inside_apptainer(cpu_ethernet_image):
    """The argv the apptainer runtime builds, run by the real apptainer: a two-rail NCCL_IB_HCA
    (which `--env` refused: 'mlx5_1 must be formatted as key=value') and a comma list reach the
    program as written, and win over a value the launcher's own environment holds."""
    import os
    import subprocess

    from launch.ranks.runtimes import runtime_named

    env = {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "UCX_TLS": "rc,ud,sm,self", "FB_SPACED": "a b=c,d"}
    argv = runtime_named("apptainer").wrap(
        cpu_ethernet_image.image, [], env, False, ["printenv", "NCCL_IB_HCA", "UCX_TLS", "FB_SPACED"]
    )
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "UCX_TLS": "tcp"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["=mlx5_0,mlx5_1", "rc,ud,sm,self", "a b=c,d"]
