"""RunSpec: its parts and roles, its validation naming the fields at fault, its bench argv."""

import dataclasses

import pytest

from launch.errors import UsageError
from launch.analysis import compare
from launch.results.result import Result
from launch.ranks.runspec import PARTS, RunSpec


def test_every_field_belongs_to_one_part_and_roles_are_declared_on_the_fields():
    assert {f.metadata["part"] for f in dataclasses.fields(RunSpec)} <= set(PARTS)
    assert set(RunSpec.part("slurm")) == {"mpi_plugin", "partition", "account", "time_limit", "exclude_nodes"}
    baseline = set(RunSpec.fields_where("baseline"))
    assert {"model", "batch_size", "runtime", "image"} <= baseline and not {"fabric", "nodes"} & baseline
    assert "image" not in RunSpec.fields_where("workload")  # sites compare across image paths


def test_compare_pairs_the_same_work_across_image_paths_but_not_across_grids():
    def result(**spec):
        return Result({"benchmark": "halo", "world_size": 4, "spec": {**RunSpec(benchmark="halo", **spec).as_dict()}})

    assert compare.key(result(image="/a.sif")) == compare.key(result(image="/site-b/b.sif"))
    assert compare.key(result(grid=96)) != compare.key(result(grid=192))


@pytest.mark.parametrize(
    "changes, fields",
    [
        ({"benchmark": "bogus"}, ("benchmark",)),
        ({"nodes": 2, "ranks": 3, "launcher": "mpirun"}, ("ranks", "nodes")),
        ({"nodes": 2, "ranks": 2}, ("launcher", "nodes")),
        ({"engine": "ddp", "allreduce": "mpi"}, ("allreduce", "engine")),
        ({"runtime": "apptainer"}, ("runtime", "image")),
        ({"link_rate": "1gbit"}, ("link_rate", "launcher")),
        ({"launcher": "emulated", "nodes": 1, "ranks": 1}, ("launcher", "nodes")),
        ({"benchmark": "allreduce", "min_bytes": 6}, ("min_bytes", "max_bytes")),
    ],
)
def test_validation_names_the_fields_at_fault(changes, fields):
    with pytest.raises(UsageError) as caught:
        RunSpec(**changes).validated()
    assert caught.value.fields == fields


def test_communication_benchmarks_get_their_own_arguments():
    assert RunSpec(benchmark="halo", grid=64, warmup=1, iters=3).bench_args() == [
        "--grid",
        "64",
        "--warmup",
        "1",
        "--iters",
        "3",
    ]
    args = RunSpec(benchmark="allreduce", backend="torch", min_bytes=8, max_bytes=64).bench_args()
    assert args[:8] == ["--collective", "allreduce", "--backend", "torch", "--min-bytes", "8", "--max-bytes", "64"]
    assert RunSpec(ranks=4, nodes=2).ranks_per_node == 2


def test_a_size_sweep_s_time_budget_reaches_its_bench_and_only_where_it_is_set():
    default = RunSpec(benchmark="allreduce", backend="mpi").validated().bench_args()
    assert not any(a.startswith("--max-seconds") for a in default)  # the bench's own 5 s
    # a file's whole seconds read as the float they are (one key for `= 1` and `= 1.0`)
    spec = RunSpec.from_dict({"benchmark": "allreduce", "max_seconds_per_size": 1}, "test")
    assert spec.max_seconds_per_size == 1.0 and isinstance(spec.max_seconds_per_size, float)
    args = spec.bench_args()
    assert args[args.index("--max-seconds-per-size") + 1] == "1"
    assert "--max-seconds-per-size" not in RunSpec(benchmark="halo", max_seconds_per_size=1.0).bench_args()
    with pytest.raises(UsageError) as caught:
        RunSpec(benchmark="allreduce", max_seconds_per_size=0.0).validated()
    assert caught.value.fields == ("max_seconds_per_size",) and "0.01..86400" in str(caught.value)


def test_the_run_command_is_generated_from_the_spec_fields():
    """`fabric-bench run` has one option per RunSpec field marked for the command line, with the
    field's default: a default changed in launch.ranks.runspec is the command's default, and a new field
    is an option without a second edit (the options beyond the spec are listed in RUN_OPTIONS)."""
    import dataclasses

    import typer.main

    from launch.cli.app import RUN_OPTIONS, app

    command = next(c for c in typer.main.get_command(app).commands.values() if c.name == "run")
    options = {p.name: p for p in command.params}
    fields = {f.name: f for f in dataclasses.fields(RunSpec)}
    for name, field in fields.items():
        if field.metadata["cli"]:
            assert options[name].default == field.default, name
            assert field.metadata["help"], f"{name}: a run option without help"
        else:  # set by the command from other options (ranks from nodes, launcher from the site, ...)
            assert name in {n for n, _, _ in RUN_OPTIONS} | {"extra_env"}, name
    assert set(options) == {n for n, f in fields.items() if f.metadata["cli"]} | {n for n, _, _ in RUN_OPTIONS}


def test_the_batch_defaults_to_256_on_gpus_and_32_on_cpus_and_is_recorded():
    """Issue 42, item 9: NVIDIA's published ResNet-50 figures use 256 per GPU; the resolved batch is
    what the spec (and so every result) holds, and what the bench program is given."""
    gpu = RunSpec(gpus_per_node=1, ranks=1).validated()
    cpu = RunSpec(ranks=1).validated()
    assert (gpu.batch_size, cpu.batch_size) == (256, 32)
    assert gpu.as_dict()["batch_size"] == 256 and "256" == gpu.bench_args()[gpu.bench_args().index("--batch-size") + 1]
    assert RunSpec(gpus_per_node=1, batch_size=64).batch_size == 64  # given: kept
    assert dataclasses.replace(gpu, ranks=1).batch_size == 256
    assert RunSpec.from_dict({"batch_size": 32, "gpus_per_node": 8}, "old.json").batch_size == 32  # a result's own


def test_the_run_command_shows_the_resolved_batch(tmp_path):
    from tests.conftest import fabric_bench

    proc = fabric_bench("run", "--gpus-per-node", "1", "--ranks", "1", "--results", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert '"--batch-size", "256"' in proc.stdout


def test_a_file_s_number_beyond_any_float_is_refused_in_one_line_for_every_float_field():
    """10**400 is a valid JSON and TOML integer that no float holds (the fuzzer's find: a traceback)."""
    floats = [f.name for f in dataclasses.fields(RunSpec) if "float" in str(f.type)]
    assert {"max_seconds_per_size", "fusion_threshold_mb"} <= set(floats)
    for name in floats:
        with pytest.raises(UsageError, match=f"spec field {name} must be float"):
            RunSpec.from_dict({name: 10**400}, "result x")
