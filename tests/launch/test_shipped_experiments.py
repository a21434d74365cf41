"""Every shipped experiment plans only points that preflight accepts, on a GPU site and on the
default CPU site, and a sweep's dry run lists what it leaves out with why (issue 49).

Preflight's decision is the function run time uses (launch.site.preflight.decide), on the facts
it reads then: the labels of each point's image as `make image` writes them (containers.recipe,
never this host's images) and, for runs on the host, the frameworks `make setup` and
`make setup-tensorflow` build Horovod for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from launch.cli.app import app
from launch.errors import UsageError
from launch.runs.dropped import MATRIX, PREFLIGHT, labels_of_name, preflight_drops
from launch.plan.experiment import expand, load_experiment, placeholder_site
from launch.runs.sweep import plan
from launch.site import preflight
from launch.site.config import Site, load_site
from tests.conftest import REPO, fabric_bench

SHIPPED = sorted((REPO / "experiments").glob("*.toml"))
RECORDED_HOROVOD = ("torch", "tf")  # the Horovod extensions `make setup` + `make setup-tensorflow` build
GPU_SITE = """\
runtime = "apptainer"
launcher = "srun"
[scheduler]
partition = "gpu"
[fabrics.ethernet]
interface = "eth0"
[fabrics.infiniband]
hca = "mlx5_0,mlx5_1,mlx5_2,mlx5_3"
interface = "ib0"
[fabrics.omnipath]
hca = "hfi1_0"
interface = "ib1"
"""
# experiments/hpec2020.experiment.toml before issue 49 (its comments left out): TensorFlow +
# Horovod on GPUs, which preflight refuses at run time, planned 234 times
OLD_HPEC2020 = """\
[experiment]
name = "hpec2020-fabrics"
repetitions = 3
time_limit_s = 1800
[matrix]
benchmark = ["train", "halo"]
framework = ["tf"]
engine = ["horovod"]
model = ["ResNet50", "VGG16", "InceptionV3"]
fabric = ["ethernet", "omnipath"]
allreduce = ["nccl", "mpi"]
gpudirect = ["on", "off"]
nodes = [1, 2, 4, 8, 16, 32]
[run]
ranks_per_node = 2
gpus_per_node = 2
batch_size = 64
precision = "fp32"
warmup = 10
iters = 20
batches_per_iter = 10
grid = 384
launcher = "sbatch"
runtime = "apptainer"
image = "images/{fabric}-cuda.sif"
"""


@pytest.fixture
def gpu_site(tmp_path) -> Path:
    path = tmp_path / "gpu-site.toml"
    path.write_text(GPU_SITE)
    return path


def site_of(kind: str, experiment, gpu_site: Path) -> Site:
    """The site a dry run plans for: the GPU site file, or the default CPU site with placeholders
    where the experiment names fabrics it lacks (as `sweep --dry-run` without --site does)."""
    return load_site(gpu_site) if kind == "gpu" else placeholder_site(experiment, Site.default())[0]


def refused(points) -> dict[str, tuple[str, str]]:
    """Each point preflight refuses, by key: its label and preflight's line; on the recorded facts."""
    out = {}
    for point in points:
        labels = labels_of_name(point.spec.image) if point.spec.containerised else None
        if why := preflight.refusal(point.spec, labels, RECORDED_HOROVOD):
            out[point.key] = (point.label, why)
    return out


def dry_run(path: Path, site: Path | None, tmp_path: Path) -> list[str]:
    args = ["sweep", str(path), "--dir", str(tmp_path / "sweep"), "--dry-run"] + (["--site", str(site)] if site else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@pytest.mark.parametrize("kind", ["gpu", "cpu"])
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_no_shipped_experiment_plans_a_point_preflight_refuses(path, kind, gpu_site, tmp_path):
    experiment = load_experiment(path)
    site = site_of(kind, experiment, gpu_site)
    points = expand(experiment, site)
    assert points and refused(points) == {}
    swept = plan(experiment, tmp_path / "sweep", site)
    assert [p.key for p in swept.points] == [p.key for p in points]  # the file itself asks for nothing refused
    assert not [d for d in swept.dropped if d.by == PREFLIGHT]
    # its dry run: every drop with why, then the plan, one line per point
    lines = dry_run(path, gpu_site if kind == "gpu" else None, tmp_path)
    drops = [line for line in lines if line.startswith("dropped ")]
    assert len([line for line in lines if re.match(r"\s*\d+\s+[0-9a-f]{12}\s+run\s", line)]) == len(points)
    assert bool(drops) == bool(swept.dropped)
    for entry in swept.dropped:  # each with its reason
        assert entry.reason and entry.lines()[0] in lines


def test_the_paper_matrix_trains_pytorch_on_gpus_and_names_why_its_mpi_arm_is_dropped(gpu_site, tmp_path):
    path = REPO / "experiments" / "hpec2020.experiment.toml"
    points = expand(load_experiment(path), load_site(gpu_site))
    trains = [p.spec for p in points if p.spec.benchmark == "train"]
    assert {(s.framework, s.engine, s.gpus_per_node) for s in trains} == {
        ("torch", "horovod", 2),
        ("torch", "ddp", 2),
    } | {
        ("torch", "horovod", 1),
        ("torch", "ddp", 1),
    }  # the 1-rank baselines take one GPU
    assert {(s.allreduce, s.gpudirect) for s in trains if s.ranks > 1} == {("nccl", "on"), ("nccl", "off")}
    proc = fabric_bench("sweep", str(path), "--site", str(gpu_site), "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for image in ("images/ethernet-cuda.sif", "images/omnipath-cuda.sif"):
        assert any(
            line.startswith(
                f"dropped 36 combinations engine=horovod allreduce=mpi: image {image}: MPI allreduce on GPU"
            )
            and "CUDA-aware MPI" in line
            and "UCX 1.13.1" in line
            for line in lines
        )
    assert "dropped 72 combinations engine=ddp allreduce=mpi: DDP has no MPI allreduce" in lines
    assert "dropped 144 combinations of the matrix no engine can run and 0 points preflight would refuse" in lines
    assert not [line for line in lines if "-mpi-" in line and not line.startswith("dropped")]


def test_the_old_paper_matrix_plans_points_preflight_refuses_and_the_sweep_drops_them(gpu_site, tmp_path):
    """The assertions above can fail: the paper file before issue 49 (TensorFlow + Horovod on GPUs)."""
    path = tmp_path / "hpec2020-old.toml"
    path.write_text(OLD_HPEC2020)
    experiment = load_experiment(path)
    for site in (load_site(gpu_site), placeholder_site(experiment, Site.default())[0]):
        bad = refused(expand(experiment, site))
        # 216 multi-rank points + 18 baselines (one per model and image), over 3 repetitions
        assert len(bad) == (3 * 2 * 2 * 6 + 3 * 2) * 3
        assert all(
            label.startswith("tf-horovod-") and "TensorFlow + Horovod on GPUs" in why for label, why in bad.values()
        )
    swept = plan(experiment, tmp_path / "sweep", load_site(gpu_site))
    assert refused(swept.points) == {} and {p.spec.benchmark for p in swept.points} == {"halo"}
    dropped = [d for d in swept.dropped if d.by == PREFLIGHT]
    assert sum(d.count for d in dropped) == 234 and len(dropped) == 2  # one reason per image
    lines = dry_run(path, gpu_site, tmp_path)
    for entry in dropped:
        at = lines.index(entry.lines()[0])
        assert "TensorFlow + Horovod on GPUs is not supported" in lines[at]
        assert lines[at + 1 : at + 1 + len(entry.points)] == [f"  {label}" for label in entry.points]
    listed = [line for line in lines if line.startswith("  tf-horovod-")]
    assert len(listed) == 2 * 3 * 13  # per image: 3 models x (12 multi-rank labels + 1 baseline)
    assert not [line for line in lines if " run " in line and "tf-horovod" in line]


def test_mpi_on_gpu_buffers_is_dropped_where_the_matrix_does_not_drop_it(gpu_site, tmp_path):
    """tf.distribute would not use MPI at all; no matrix rule drops it, preflight's decision does
    (MPI on GPU buffers needs a CUDA-aware MPI in the image): planned never, refused never."""
    path = tmp_path / "tf-native.toml"
    path.write_text(
        '[matrix]\nallreduce = ["nccl", "mpi"]\nnodes = [2]\n[run]\nframework = "tf"\nengine = "native"\n'
        'model = "ResNet50"\ngpus_per_node = 1\nranks_per_node = 1\nfabric = "infiniband"\n'
        'runtime = "apptainer"\nimage = "images/{fabric}-cuda.sif"\n'
    )
    experiment = load_experiment(path)
    assert {why for _, why in refused(expand(experiment, load_site(gpu_site))).values()} == {
        preflight.mpi_on_gpus_refusal(
            "train", "mpi", 1, "images/infiniband-cuda.sif", labels_of_name("images/infiniband-cuda.sif")
        )
    }
    swept = plan(experiment, tmp_path / "sweep", load_site(gpu_site))
    assert {p.spec.allreduce for p in swept.points} == {"nccl", None}  # the runs, and their baseline
    (entry,) = swept.dropped
    assert (
        entry.by == PREFLIGHT
        and "CUDA-aware MPI" in entry.reason
        and entry.points == ("tf-native-ResNet50-infiniband-mpi-n2x1-b256",)
    )
    # with no NCCL arm beside it, the runs' 1-rank baseline serves nothing: it goes with them
    path.write_text(path.read_text().replace('allreduce = ["nccl", "mpi"]', 'allreduce = ["mpi"]'))
    kept, dropped = preflight_drops(expand(load_experiment(path), load_site(gpu_site)))
    assert kept == [] and len(dropped) == 2
    (baseline,) = [d for d in dropped if d.reason == "the 1-rank baseline of dropped runs only"]
    assert baseline.points == ("tf-native-ResNet50-nofabric-n1x1-b256",)
    with pytest.raises(UsageError, match="preflight would refuse every point"):
        plan(load_experiment(path), tmp_path / "sweep", load_site(gpu_site))
    # an image that declares a CUDA-aware MPI is not refused: the decision reads the labels
    labels = {**labels_of_name("images/infiniband-cuda.sif"), "org.fabric-bench.mpi-cuda": "ucx-1.22.0"}
    assert preflight.mpi_on_gpus_refusal("train", "mpi", 1, "x.sif", labels) is None


def test_a_matrix_drop_names_the_values_that_decide_it(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[matrix]\nengine = ["ddp", "horovod"]\nallreduce = ["gloo", "mpi"]\n[run]\nranks_per_node = 2\n')
    swept = plan(load_experiment(path), tmp_path / "sweep", Site.default())
    assert [(d.by, d.what, d.reason, d.count) for d in swept.dropped] == [
        (MATRIX, "engine=ddp allreduce=mpi", "DDP has no MPI allreduce", 1)
    ]
    assert swept.dropped_lines() == [
        "dropped 1 combination engine=ddp allreduce=mpi: DDP has no MPI allreduce",
        "dropped 1 combination of the matrix no engine can run and 0 points preflight would refuse",
    ]
