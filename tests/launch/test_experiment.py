"""Experiment files: validation and matrix expansion (pure, no runs)."""

import re
from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.plan.experiment import expand, load_experiment
from launch.site.config import FabricSite, Site
from tests.conftest import REPO, fabric_bench

SHIPPED = sorted((REPO / "experiments").glob("*experiment*.toml"))
PAPER_SITE = Site(
    launcher="sbatch",
    runtime="apptainer",
    fabrics={"ethernet": FabricSite(interface="eth0"), "omnipath": FabricSite(interface="ib0", device="hfi1_0")},
)


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def points_of(tmp_path, text, site=None, **kw):
    return expand(load_experiment(write(tmp_path, text)), site, **kw)


def test_shipped_experiments_load_and_expand():
    assert {p.name for p in SHIPPED} >= {"hpec2020.experiment.toml", "cpu-small.experiment.toml"}
    for path in SHIPPED:
        assert expand(load_experiment(path), PAPER_SITE)


def test_paper_matrix_counts_and_baselines(tmp_path):
    from launch.runs.sweep import plan

    experiment = load_experiment(REPO / "experiments" / "hpec2020.experiment.toml")
    points = plan(experiment, tmp_path / "sweep", PAPER_SITE).points
    # training (issue 49): PyTorch under Horovod and DDP, TensorFlow under tf.distribute, x 3 models x
    # 2 fabrics x nccl x (gdr on, off) x 6 node counts; the MPI arm: Horovod on PyTorch x 3 models over
    # Ethernet only x (gdr on, off) x 6 node counts (the cuda images as `make image` labels them say
    # their MPI is CUDA-aware and hold Horovod's MPI build; Omni-Path's psm2 carries host buffers
    # only), TensorFlow + Horovod left out by preflight; the CFD half (halo proxy): 2 fabrics x 6 node
    # counts, once (it reads no framework, engine, model, allreduce or GPUDirect); one 1-rank baseline
    # per engine and model (and the halo) and image (images differ per fabric); x 3
    runs = [p for p in points if not p.baseline]
    baselines = [p for p in points if p.baseline]
    assert len(runs) == (3 * 3 * 2 * 1 * 2 * 6 + 3 * 1 * 2 * 6 + 2 * 6) * 3
    assert len(baselines) == (3 * 3 + 1) * 2 * 3
    trains = [p.spec for p in runs if p.spec.benchmark == "train"]
    assert {(s.framework, s.engine) for s in trains} == {("torch", "horovod"), ("torch", "ddp"), ("tf", "native")}
    assert {(s.allreduce, s.gpudirect) for s in trains} == {("nccl", g) for g in ("on", "off")} | {
        ("mpi", g) for g in ("on", "off")
    }
    assert {(s.fabric, s.framework, s.engine) for s in trains if s.allreduce == "mpi"} == {
        ("ethernet", "torch", "horovod")
    }
    halo = [p for p in runs if p.spec.benchmark == "halo"]
    assert len(halo) == 2 * 6 * 3 and {(p.spec.allreduce, p.spec.gpudirect, p.spec.model) for p in halo} == {
        (None, None, "resnet18")
    }  # the RunSpec defaults: fields the halo proxy does not read
    assert all(p.label.startswith("halo-g384-") for p in halo)
    assert {p.spec.image for p in runs} == {"images/ethernet-cuda.sif", "images/omnipath-cuda.sif"}
    assert all(p.spec.ranks == 2 * p.spec.nodes and p.spec.time_limit == "30" for p in runs)
    for point in runs:  # every figure's baseline is in the same repetition
        assert any(
            b.repetition == point.repetition
            and b.spec.model == point.spec.model
            and b.spec.ranks == 1
            and b.spec.image == point.spec.image
            for b in baselines
        )
    assert len({p.key for p in points}) == len(points)
    first = points.index(baselines[0])  # each baseline comes before the runs it serves
    assert all(
        points.index(p) > first
        for p in runs
        if p.spec.model == baselines[0].spec.model and p.spec.image == baselines[0].spec.image and p.repetition == 0
    )


def test_engines_models_and_precisions_are_kept_per_framework(tmp_path):
    points = points_of(
        tmp_path,
        """
[matrix]
framework = ["torch", "tf"]
engine = ["ddp", "native", "horovod"]
model = ["resnet18", "SmallCNN"]
precision = ["fp32", "amp", "mixed"]
ranks_per_node = [2]
""",
    )
    combos = {(p.spec.framework, p.spec.engine, p.spec.model, p.spec.precision) for p in points if not p.baseline}
    assert combos == {
        (f, e, m, pr)
        for f, engines, m, precisions in (
            ("torch", ("ddp", "horovod"), "resnet18", ("fp32", "amp")),
            ("tf", ("native", "horovod"), "SmallCNN", ("fp32", "mixed")),
        )
        for e in engines
        for pr in precisions
    }
    assert sum(p.baseline for p in points) == len(combos)  # one 1-rank baseline each


def test_a_one_rank_point_of_the_matrix_is_its_own_baseline(tmp_path):
    points = points_of(tmp_path, '[matrix]\nranks_per_node = [1, 2]\n[run]\nfabric = "ethernet"\n')
    assert [(p.spec.ranks, p.baseline, p.spec.fabric) for p in points] == [
        (1, True, "ethernet"),
        (2, False, "ethernet"),
    ]


def test_keys_are_stable_and_depend_on_spec_and_repetition_only(tmp_path):
    text = "[experiment]\nrepetitions = 2\ntime_limit_s = 60\n[matrix]\nranks_per_node = [2]\n"
    first = points_of(tmp_path, text)
    again = points_of(tmp_path, text.replace("60", "90"))  # a different guard, the same measurement
    assert [p.key for p in first] == [p.key for p in again]
    assert len({p.key for p in first}) == 4 and [p.repetition for p in first] == [0, 0, 1, 1]
    other = points_of(tmp_path, text.replace("[2]", "[3]"))
    assert {p.key for p in other if not p.baseline}.isdisjoint(p.key for p in first)


def test_emulated_single_node_points_run_locally_and_launcher_can_be_overridden(tmp_path):
    text = '[matrix]\nnodes = [1, 2]\nfabric = ["ethernet"]\n[run]\nranks_per_node = 1\nlauncher = "emulated"\n'
    points = points_of(tmp_path, text)
    assert [(p.spec.launcher, p.spec.nodes, p.spec.fabric) for p in points] == [
        ("local", 1, None),
        ("emulated", 2, "ethernet"),
    ]
    srun = points_of(tmp_path, text, launcher="srun")
    assert {p.spec.launcher for p in srun} == {"srun"}


@pytest.mark.parametrize(
    "text, message",
    [
        ('[matrix]\nmodle = ["resnet18"]\n', "exp.toml: [matrix].modle: unknown key"),
        ("[matrix]\nmodel = []\n", "exp.toml: [matrix].model: empty list"),
        ('[run]\nmodel = "resnet18"\n', "exp.toml: [matrix]: missing or empty"),
        ("[matrix]\nnodes = 2\n", "exp.toml: [matrix].nodes: expected a list"),
        ('[matrix]\nnodes = ["two"]\n', "exp.toml: [matrix].nodes: expected an int, got 'two'"),
        ("[matrix]\nnodes = [1, 1]\n", "exp.toml: [matrix].nodes: expected distinct values"),
        ("[matrix]\nnodes = [1]\n[run]\nnodes = 2\n", "exp.toml: [run].nodes: contradicts [matrix].nodes"),
        ("[experiment]\nrepetitions = 0\n[matrix]\nnodes = [1]\n", "exp.toml: [experiment].repetitions"),
        ("[experiment]\ntime_limit_s = -5\n[matrix]\nnodes = [1]\n", "exp.toml: [experiment].time_limit_s"),
        ('[experiment]\nowner = "me"\n[matrix]\nnodes = [1]\n', "exp.toml: [experiment].owner: unknown key"),
        (
            '[matrix]\nmodel = ["resnet9000"]\n',
            "exp.toml: [matrix].model: 'resnet9000' is in no runnable combination (model of another",
        ),
        (
            '[matrix]\nallreduce = ["mpi"]\ngpudirect = ["on"]\n[run]\nengine = "horovod"\n',
            "[matrix].allreduce: 'mpi' is in no runnable combination (GPUDirect 'on' needs GPUs",
        ),
        (
            '[matrix]\nallreduce = ["gloo"]\ngpudirect = ["on"]\n[run]\nengine = "horovod"\ngpus_per_node = 1\n',
            "[matrix].allreduce: 'gloo' is in no runnable combination (GPUDirect 'on' needs NCCL or CUDA-aware MPI",
        ),
        (
            '[matrix]\nnodes = [1]\n[run]\nengine = "horovod"\nallreduce = "mpi"\ngpudirect = "on"\n',
            "exp.toml: [run].gpudirect:",
        ),
        ('[matrix]\nnodes = [1]\n[run]\nallreduce = "mpi"\n', "exp.toml: [run].allreduce: DDP has no MPI"),
        ('[matrix]\nnodes = [1, 4]\n[run]\nlauncher = "local"\n', "exp.toml: [matrix].nodes: --launcher local runs"),
        (
            '[matrix]\nnodes = [1, 4]\n[run]\nlauncher = "mpirun"\n',
            "exp.toml: [matrix].nodes: 4 nodes under the mpirun",
        ),
        (
            '[matrix]\nranks_per_node = [3]\n[run]\nallreduce = "nccl"\nlauncher = "srun"\n',
            "exp.toml: [run].allreduce: --allreduce nccl needs GPUs",
        ),
        ("[matrix]\nnodes = [1]\n[run.env]\nX = 1\n", "exp.toml: [run.env].X"),
        ("[matrix\n", "exp.toml: not valid TOML"),
    ],
)
def test_malformed_experiments_name_file_and_key(tmp_path, text, message):
    with pytest.raises(UsageError) as caught:
        points_of(tmp_path, text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[matrix]\nengine = ["mxnet"]\n', "exp.toml: [matrix].engine: 'mxnet' is in no runnable combination"),
        ('[experiment]\nname = "a b"\n[matrix]\nnodes = [1]\n', "exp.toml: [experiment].name"),
    ],
)
def test_cli_refuses_bad_experiments_with_one_line_and_exit_2(tmp_path, text, message):
    proc = fabric_bench("sweep", str(write(tmp_path, text)), "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_real_sweep_needs_the_site_file_a_dry_run_does_not(tmp_path):
    path = str(write(tmp_path, '[matrix]\nfabric = ["omnipath"]\n[run]\nlauncher = "sbatch"\n'))
    real = fabric_bench("sweep", path, "--dir", str(tmp_path / "sweep"))
    assert real.returncode == 2 and "exp.toml: [matrix].fabric: fabric 'omnipath' is not present" in real.stderr
    assert not (tmp_path / "sweep").exists()
    dry = fabric_bench("sweep", path, "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "a site file must fill in [fabrics.omnipath] interface, hca" in dry.stdout


def test_paper_dry_run_prints_matrix_and_count_without_a_site_file(tmp_path):
    proc = fabric_bench("sweep", "experiments/hpec2020.experiment.toml", "--dir", str(tmp_path / "sweep"), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    # planned: torch horovod, torch ddp, tf native, and Horovod's MPI arm over Ethernet (issue 49:
    # Omni-Path's MPI arm and TensorFlow + Horovod are dropped, each with why)
    total = (3 * 3 * 2 * 1 * 2 * 6 + 3 * 2 * 6 + 2 * 6 + (3 * 3 + 1) * 2) * 3
    assert f"{total} runs ({(3 * 3 + 1) * 2 * 3} 1-rank baselines, 3 repetitions); {total} to run" in proc.stdout
    planned = [line for line in lines if re.match(r"\s*\d+\s+[0-9a-f]{12}\s+run\s", line)]
    assert len(planned) == total and sum(" halo-g384-" in line for line in planned) == 2 * 6 * 3 + 2 * 3
    assert sum("-nccl-gdron-" in line for line in planned) == 3 * 3 * 2 * 6 * 3
    mpi = [line for line in planned if "-mpi-gdr" in line]
    assert len(mpi) == 3 * 2 * 6 * 3 and all("torch-horovod-" in line and "-ethernet-" in line for line in mpi)
    assert not any("tf-horovod-" in line for line in planned)
    assert any(line.startswith("dropped ") and "omnipath's MPI path" in line and "CUDA-aware" in line for line in lines)
    (placeholder,) = [line for line in lines if "placeholders" in line]
    assert "[fabrics.omnipath] interface, hca" in placeholder
    assert not (tmp_path / "sweep").exists()


def test_the_paper_file_marks_what_the_abstract_does_not_state():
    text = (REPO / "experiments" / "hpec2020.experiment.toml").read_text()
    settings = [line for line in text.splitlines() if re.match(r"^(\w+)\s*=", line)]
    stated_or_guards = (
        "name",
        "description",
        "time_limit_s",
        "benchmark",
        "fabric",
        "allreduce",
        "gpudirect",
        "launcher",
        "runtime",
        "image",
        "iters",
        "batches_per_iter",
    )
    for line in settings:
        key = line.split("=")[0].strip()
        if key not in stated_or_guards:
            assert "ASSUMED" in line, f"{key}: not in the abstract, so it must say ASSUMED"
    assert "does not have a significant" in text and "Computational Fluid Dynamics" in text


def test_blame_follows_the_error_fields_not_its_wording(tmp_path):
    from launch.plan.experiment import blame

    path = tmp_path / "exp.toml"
    path.write_text('[matrix]\nnodes = [1, 2]\nmodel = ["resnet18"]\n[run]\nengine = "ddp"\n')
    experiment = load_experiment(path)
    worded_about_nodes = "nodes nodes --nodes"
    assert str(blame(experiment, UsageError(worded_about_nodes, fields=("model",)))).startswith(
        "exp.toml: [matrix].model: "
    )
    assert str(blame(experiment, UsageError(worded_about_nodes, fields=("engine", "nodes")))).startswith(
        "exp.toml: [matrix].nodes: "
    )  # a varying axis first
    assert str(blame(experiment, UsageError(worded_about_nodes, fields=("engine",)))).startswith(
        "exp.toml: [run].engine: "
    )
    assert str(blame(experiment, UsageError(worded_about_nodes))) == f"exp.toml: [run]: {worded_about_nodes}"
