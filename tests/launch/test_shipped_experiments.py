"""Every shipped experiment plans only points that preflight accepts, on a GPU site and on the
default CPU site, and a sweep's dry run lists what it leaves out with why (issue 49); MPI on GPU
buffers is planned where the image says it can carry them.

Preflight's decision is the function run time uses (launch.site.preflight.decide), on the facts
it reads then: the labels of each point's image as `make image` writes them (containers.recipe,
never this host's images) and, for runs on the host, the frameworks `make setup` and
`make setup-tensorflow` build Horovod for."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from containers import stack
from containers.recipe import LABEL_PREFIX as LABEL
from launch.cli.app import app
from launch.errors import UsageError
from launch.runs.dropped import MATRIX, PREFLIGHT, labels_of_name, preflight_drops
from launch.plan.experiment import expand, load_experiment, placeholder_site
from launch.ranks.runspec import RunSpec
from launch.runs.sweep import plan
from launch.site import preflight
from launch.site.config import Site, load_site
from tests.conftest import REPO, fabric_bench

SHIPPED = sorted((REPO / "experiments").glob("*.toml"))
RECORDED_HOROVOD = ("torch", "tf")  # the Horovod extensions `make setup` + `make setup-tensorflow` build
# experiments/hpec2020.experiment.toml before issue 49 (its comments left out): TensorFlow +
# Horovod on GPUs, which preflight refuses at run time, planned 234 times (450 with the MPI arm,
# which a matrix rule then dropped)
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
    swept = plan(experiment, tmp_path / "sweep", site)
    assert swept.points and refused(swept.points) == {}  # nothing planned that preflight refuses
    # what the matrix holds and preflight refuses is left out, each point listed under its reason
    planned = {q.key for q in swept.points}
    left_out = [p for p in points if p.key not in planned]
    dropped = [d for d in swept.dropped if d.by == PREFLIGHT]
    assert len(left_out) == sum(d.count for d in dropped)
    listed = {label for d in dropped for label in d.points}
    assert {dataclasses.replace(p, repetition=0).label.removesuffix("-r0") for p in left_out} == listed
    # its dry run: every drop with why, then the plan, one line per point
    lines = dry_run(path, gpu_site if kind == "gpu" else None, tmp_path)
    drops = [line for line in lines if line.startswith("dropped ")]
    assert len([line for line in lines if re.match(r"\s*\d+\s+[0-9a-f]{12}\s+run\s", line)]) == len(swept.points)
    assert bool(drops) == bool(swept.dropped)
    for entry in swept.dropped:  # each with its reason
        assert entry.reason and entry.lines()[0] in lines


CLAIMS = (f"{LABEL}.{stack.MPI_CUDA_LABEL}", f"{LABEL}.{stack.HOROVOD_MPI_GPU_LABEL}")
CARRIES_GPU_BUFFERS = {"ethernet", "infiniband", "roce"}  # Open MPI over UCX with CUDA; the others: psm2, OFI
CUDA_FABRICS = ("ethernet", "infiniband", "roce", "omnipath", "efa", "slingshot")


def without_claims(labels: dict[str, str]) -> dict[str, str]:
    """An image's labels less the two preflight reads before MPI on GPU buffers (an image made
    before issue 49 carried neither)."""
    return {k: v for k, v in labels.items() if k not in CLAIMS}


def test_the_paper_matrix_trains_on_gpus_and_plans_its_mpi_arm_where_the_mpi_carries_gpu_buffers(gpu_site, tmp_path):
    path = REPO / "experiments" / "hpec2020.experiment.toml"
    swept = plan(load_experiment(path), tmp_path / "sweep", load_site(gpu_site))
    trains = [p.spec for p in swept.points if p.spec.benchmark == "train"]
    assert {(s.framework, s.engine, s.gpus_per_node) for s in trains} == {
        ("torch", "horovod", 2),
        ("torch", "ddp", 2),
        ("tf", "native", 2),  # TensorFlow where its GPU build works: its own engine
    } | {
        ("torch", "horovod", 1),
        ("torch", "ddp", 1),
        ("tf", "native", 1),
    }  # the 1-rank baselines take one GPU
    # the paper's axis, NCCL against MPI on GPU buffers, each with GPUDirect on and off
    assert {(s.allreduce, s.gpudirect) for s in trains if s.ranks > 1} == {
        ("nccl", "on"),
        ("nccl", "off"),
        ("mpi", "on"),
        ("mpi", "off"),
    }
    mpi = [s for s in trains if s.allreduce == "mpi"]
    # only Horovod hands PyTorch's gradients to MPI, and only Ethernet's MPI path (UCX) carries them
    assert {(s.fabric, s.framework, s.engine) for s in mpi} == {("ethernet", "torch", "horovod")}
    assert all(s.hands_gpu_buffers_to_mpi for s in mpi)
    proc = fabric_bench("sweep", str(path), "--site", str(gpu_site), "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # the cuda images as `make image` labels them say their MPI is CUDA-aware and hold Horovod's MPI
    # build: nothing of Ethernet's MPI arm is dropped
    assert not [line for line in lines if line.startswith("dropped ") and "ethernet-cuda.sif: --allreduce mpi" in line]
    # Omni-Path's MPI path (psm2 without CUDA) carries host buffers only, whatever the image says
    (omnipath,) = [line for line in lines if line.startswith("dropped ") and "fabric omnipath's MPI path" in line]
    assert omnipath.startswith("dropped 108 points:") and "OMPI_MCA_mtl=psm2" in omnipath
    assert "dropped 72 combinations engine=ddp allreduce=mpi: DDP has no MPI allreduce" in lines
    assert any(
        line.startswith("dropped ") and "TensorFlow + Horovod on GPUs is not supported" in line for line in lines
    )
    assert any(
        line.startswith("dropped 216 points:") and "native never hands its gradients to MPI" in line for line in lines
    )
    planned = [line for line in lines if re.match(r"\s*\d+\s+[0-9a-f]{12}\s+run\s", line)]
    assert len(planned) == len(swept.points)
    planned_mpi = [line for line in planned if "-mpi-" in line]
    assert len(planned_mpi) == len(mpi) and all("-ethernet-" in line for line in planned_mpi)


@pytest.mark.parametrize("fabric", CUDA_FABRICS)
def test_the_mpi_arm_is_planned_where_the_image_says_it_has_a_cuda_aware_mpi_and_horovod_s_mpi_build(
    fabric, gpu_site, tmp_path
):
    """Preflight's decision on Horovod's MPI arm on GPUs, per fabric, with the labels `make image`
    writes: planned over Ethernet, InfiniBand and RoCE (Open MPI over UCX with CUDA), refused over
    Omni-Path (psm2), EFA and Slingshot (OFI without CUDA); without the image's claims, refused
    everywhere, the line naming the claim that is missing."""
    path = tmp_path / "mpi-arm.toml"
    path.write_text(
        '[matrix]\nallreduce = ["nccl", "mpi"]\nnodes = [2]\n[run]\nframework = "torch"\n'
        'engine = "horovod"\nmodel = "resnet50"\ngpus_per_node = 1\nranks_per_node = 1\n'
        f'fabric = "{fabric}"\nruntime = "apptainer"\nimage = "images/{{fabric}}-cuda.sif"\n'
    )
    site = tmp_path / "site.toml"  # the GPU site with a RoCE rail too
    site.write_text(
        gpu_site.read_text()
        + '[fabrics.roce]\nhca = "mlx5_4"\ninterface = "eth1"\ngid_index = 3\ntraffic_class = 106\n'
    )
    (spec,) = [p.spec for p in expand(load_experiment(path), load_site(site)) if p.spec.allreduce == "mpi"]
    labels = labels_of_name(spec.image or "")
    assert set(CLAIMS) <= set(labels) if fabric in CARRIES_GPU_BUFFERS else CLAIMS[0] not in labels
    why = preflight.refusal(spec, labels)
    if fabric in CARRIES_GPU_BUFFERS:
        assert why is None, why
        planned = plan(load_experiment(path), tmp_path / "sweep", load_site(site))
        assert "mpi" in {p.spec.allreduce for p in planned.points}
    else:
        assert why and f"fabric {fabric}'s MPI path" in why
    bare = without_claims(labels)
    only_mpi = preflight.refusal(spec, {**bare, CLAIMS[0]: "ucx"})
    if fabric in CARRIES_GPU_BUFFERS:  # the CUDA-aware MPI alone is not enough: Horovod's MPI build too
        assert f"no {CLAIMS[1]} label" in str(only_mpi) and "HOROVOD_GPU_OPERATIONS=MPI" in str(only_mpi)
        assert CLAIMS[0] not in str(only_mpi).split("; no ")[1]
        assert f"no {CLAIMS[0]} or {CLAIMS[1]} label" in str(preflight.refusal(spec, bare))
    else:
        assert only_mpi and f"fabric {fabric}'s MPI path" in only_mpi


def test_the_old_paper_matrix_plans_points_preflight_refuses_and_the_sweep_drops_them(gpu_site, tmp_path):
    """The assertions above can fail: the paper file before issue 49 (TensorFlow + Horovod on GPUs)."""
    path = tmp_path / "hpec2020-old.toml"
    path.write_text(OLD_HPEC2020)
    experiment = load_experiment(path)
    for site in (load_site(gpu_site), placeholder_site(experiment, Site.default())[0]):
        bad = refused(expand(experiment, site))
        # 432 multi-rank points (nccl and mpi) + 18 baselines (one per model and image), over 3 repetitions
        assert len(bad) == (3 * 2 * 2 * 2 * 6 + 3 * 2) * 3
        assert all(
            label.startswith("tf-horovod-") and "TensorFlow + Horovod on GPUs" in why for label, why in bad.values()
        )
    swept = plan(experiment, tmp_path / "sweep", load_site(gpu_site))
    assert refused(swept.points) == {} and {p.spec.benchmark for p in swept.points} == {"halo"}
    dropped = [d for d in swept.dropped if d.by == PREFLIGHT]
    assert sum(d.count for d in dropped) == 450 and len(dropped) == 2  # one reason per image
    lines = dry_run(path, gpu_site, tmp_path)
    for entry in dropped:
        at = lines.index(entry.lines()[0])
        assert "TensorFlow + Horovod on GPUs is not supported" in lines[at]
        assert lines[at + 1 : at + 1 + len(entry.points)] == [f"  {label}" for label in entry.points]
    listed = [line for line in lines if line.startswith("  tf-horovod-")]
    assert len(listed) == 2 * 3 * 25  # per image: 3 models x (24 multi-rank labels + 1 baseline)
    assert not [line for line in lines if " run " in line and "tf-horovod" in line]


def test_mpi_on_gpu_buffers_is_dropped_where_the_matrix_does_not_drop_it(gpu_site, tmp_path):
    """tf.distribute would not use MPI at all; no matrix rule drops it, preflight's decision does,
    whatever the image says: planned never, refused never."""
    path = tmp_path / "tf-native.toml"
    path.write_text(
        '[matrix]\nallreduce = ["nccl", "mpi"]\nnodes = [2]\n[run]\nframework = "tf"\nengine = "native"\n'
        'model = "ResNet50"\ngpus_per_node = 1\nranks_per_node = 1\nfabric = "infiniband"\n'
        'runtime = "apptainer"\nimage = "images/{fabric}-cuda.sif"\n'
    )
    experiment = load_experiment(path)
    (spec,) = [p.spec for p in expand(experiment, load_site(gpu_site)) if p.spec.allreduce == "mpi"]
    claims = {f"{LABEL}.{stack.MPI_CUDA_LABEL}": "ucx", f"{LABEL}.{stack.HOROVOD_MPI_GPU_LABEL}": "/x"}
    why = preflight.mpi_on_gpus_refusal(spec, {**labels_of_name(spec.image or ""), **claims})
    assert why and "native never hands its gradients to MPI" in why
    assert {why for _, why in refused(expand(experiment, load_site(gpu_site))).values()} == {why}
    swept = plan(experiment, tmp_path / "sweep", load_site(gpu_site))
    assert {p.spec.allreduce for p in swept.points} == {"nccl", None}  # the runs, and their baseline
    (entry,) = swept.dropped
    assert (
        entry.by == PREFLIGHT
        and "never hands its gradients to MPI" in entry.reason
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


def test_mpi_on_gpu_buffers_in_a_collective_benchmark_needs_the_image_s_claim(gpu_site):
    """The collective kinds' mpi backend on GPUs hands device buffers to MPI: accepted only where
    the image says its MPI is CUDA-aware (no Horovod build needed), and never on the host."""
    spec = RunSpec(
        benchmark="allreduce",
        backend="mpi",
        gpus_per_node=1,
        ranks=2,
        nodes=2,
        launcher="srun",
        runtime="apptainer",
        fabric="infiniband",
        image="images/infiniband-cuda.sif",
    ).validated()
    assert spec.hands_gpu_buffers_to_mpi and spec.max_bytes == 8 * 2**30  # swept as far as NCCL
    labels = labels_of_name(spec.image or "")
    assert labels[CLAIMS[0]] == "ucx" and preflight.refusal(spec, labels) is None  # as `make image` labels it
    why = preflight.refusal(spec, without_claims(labels))
    assert why and f"no {CLAIMS[0]} label" in why and stack.HOROVOD_MPI_GPU_LABEL not in why
    assert preflight.refusal(spec, {**without_claims(labels), CLAIMS[0]: "ucx"}) is None  # no Horovod needed
    on_host = dataclasses.replace(spec, runtime="host", image=None).validated()
    assert "a run on the host" in str(preflight.refusal(on_host, None))
    on_cpus = dataclasses.replace(spec, gpus_per_node=0).validated()
    assert not on_cpus.hands_gpu_buffers_to_mpi and preflight.refusal(on_cpus, labels) is None


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
