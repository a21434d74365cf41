"""Every argv sink typed, every entry point the same rule (issue 64, C-10, C-12, build item 4).

C-10: an experiment file chose the image: `[run] runtime = "podman"`, `image =
"docker.io/attacker/evil:latest"` reached `podman run ... evil:latest` at a sweep's preflight,
where `replay` of the same spec was refused. Now a travelling file's image runs only where this
site has it (a digest in its image store) or accepts it by name (`sweep --accept-image`).
C-12: a 400-digit link rate for the emulated launcher ended in an OverflowError traceback (a
float of 400 digits is infinite). Now a link rate is a shape computed in integers, bounded.
The sinks (a container runtime's argv, mpirun's, tc's) take shapes: mypy refuses a raw str there.
"""

from __future__ import annotations

import os

import pytest

from containers import image_store
from launch import shapes
from launch.errors import UsageError
from launch.fleet.emulate import faults
from launch.fleet.emulate.links import run_rate_bit_s
from launch.plan.experiment import load_experiment
from launch.ranks.runspec import RunSpec
from launch.runs import images
from launch.runs.sweep import one_job_script, plan
from launch.site.config import Site
from tests.conftest import fabric_bench
from tests.test_architecture import mypy_errors

EVIL = "docker.io/attacker/evil:latest"


def one_error_line(proc) -> str:
    """The refusal of a CLI call: exit 2, one line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    return proc.stderr.strip()


def test_c10_an_experiment_file_does_not_choose_the_image_its_sweep_runs(tmp_path):
    experiment = tmp_path / "evil.experiment.toml"
    experiment.write_text(
        f'[experiment]\nname = "evil"\n[matrix]\nbenchmark = ["allreduce"]\n'
        f'[run]\nruntime = "podman"\nimage = "{EVIL}"\n'
    )
    env = {**os.environ, "FABRIC_BENCH_CACHE": str(tmp_path / "cache")}  # an image store with nothing built
    sweep = tmp_path / "sweep"
    line = one_error_line(fabric_bench("sweep", str(experiment), "--dir", str(sweep), "--quiet-check", "0", env=env))
    assert line.startswith("fabric-bench: error: evil.experiment.toml: [run].image: image " + EVIL), line
    assert f"--accept-image {EVIL}" in line and not sweep.exists()  # refused before anything ran or was written
    # a dry run plans images not built yet: it shows the run, refusing nothing
    dry = fabric_bench("sweep", str(experiment), "--dir", str(sweep), "--dry-run", env=env)
    assert dry.returncode == 0 and "1 to run" in dry.stdout, dry.stderr


def test_c12_a_400_digit_link_rate_is_refused_in_one_line(tmp_path):
    rate = "1" * 400 + "gbit"
    proc = fabric_bench(
        "run", "--benchmark", "allreduce", "--launcher", "emulated", "--nodes", "2", "--dry-run",
        "--results", str(tmp_path), "--link-rate", rate,
    )  # fmt: skip
    assert one_error_line(proc).startswith("fabric-bench: error: --link-rate: unknown link rate '1111")
    # every other door of a rate: emulate up's --link and --slow, an emulated fabric's name
    for parse in (
        lambda: faults.parse([f"n0-n1={rate}"], [], 2),
        lambda: faults.parse(["1gbit"], [f"n1={rate}"], 2),
        lambda: run_rate_bit_s(RunSpec(launcher="emulated", nodes=2, benchmark="allreduce", fabric=f"emu-eth-{rate}")),
    ):
        with pytest.raises(UsageError, match="unknown (link rate|emulated fabric)"):
            parse()


def test_a_link_rate_is_whole_bits_within_bounds():
    assert shapes.link_rate("r", "2.5gbit/s") == 2_500_000_000
    assert shapes.link_rate("r", "0.3m") == 300_000  # integers: float(0.3) * 1e6 is 300000.00000000006
    assert shapes.link_rate("r", "1000t") == shapes.MAX_LINK_RATE_BIT_S
    for refused in ("1000.000000001t", "0.5k", "1e9", "١gbit", 10**16, True):  # an Arabic-Indic 1
        with pytest.raises(UsageError, match="unknown link rate"):
            shapes.link_rate("r", refused)
    assert faults.Faults(slow_nodes=((1, None),)).egress_rate(1, shapes.link_rate("r", "4k")) == 1000
    with pytest.raises(UsageError, match="--slow n1"):  # a quarter of 2 kbit/s is below a link's least
        faults.Faults(slow_nodes=((1, None),)).egress_rate(1, shapes.link_rate("r", "2k"))


@pytest.mark.parametrize(
    "field, value",
    [
        ("image", "--volume=/:/host"),
        ("image", "evil\nimage.sif"),
        ("image", "evil\u202eimage.sif"),  # a right-to-left override (Cf)
        ("image", "x" * 1025),
        ("hostfile", "-hosts"),
        ("hostfile", "/tmp/\x1b[2Jhosts"),
        ("runtime", "docker"),
    ],
)
def test_an_argv_value_outside_its_shape_is_refused_by_the_spec(field, value):
    with pytest.raises(UsageError, match="refused|unknown runtime") as refused:
        RunSpec(**{"runtime": "apptainer", "image": "/i.sif", field: value}).validated()
    assert f"--{field}" in str(refused.value)


@pytest.mark.parametrize("field", ["image", "hostfile"])
def test_a_path_with_a_space_or_any_letter_is_one_argv_element(field):
    """CI's own cache path has a space and an é; a shell never parses these."""
    value = "/tmp/cold start é/images/ethernet-cpu $(id).sif"
    spec = RunSpec(**{"runtime": "apptainer", "image": "/i.sif", field: value}).validated()
    assert getattr(spec, field) == value


def test_the_image_gate_admits_an_image_this_site_built_and_one_accepted_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_BENCH_CACHE", str(tmp_path / "cache"))
    built, other = tmp_path / "built.sif", tmp_path / "other.sif"
    built.write_bytes(b"an image this site built")
    other.write_bytes(b"an image another site named")
    image_store.record(
        image_store.ImageRecord(
            fabric="ethernet", flavour="cpu", runtime="apptainer", image=str(built), sha256=built_digest(built),
            size_bytes=built.stat().st_size, input_key="k", recipe_hash="r", bundle_commit="c", built_at="t",
            build_seconds=1.0, log="l",
        )
    )  # fmt: skip

    def spec(image) -> RunSpec:
        return RunSpec(runtime="apptainer", image=str(image), benchmark="allreduce").validated()

    assert images.refusal(spec(built), ()) is None
    assert "--accept-image " + str(other) in images.refusal(spec(other), ())
    assert images.refusal(spec(other), (str(other),)) is None
    fifo = tmp_path / "image.sif"
    os.mkfifo(fifo)  # hashing it would never end: not a regular file, not an image this site has
    assert "not one this site has built" in images.refusal(spec(fifo), ())
    assert images.refusal(RunSpec(benchmark="allreduce").validated(), ()) is None  # the host's software
    # a one-job sweep's own sweep, inside the job, is told what this side accepted
    experiment = tmp_path / "e.experiment.toml"
    experiment.write_text(
        '[experiment]\nname = "e"\ntime_limit_s = 60\n[matrix]\nbenchmark = ["allreduce"]\n'
        f'[run]\nlauncher = "sbatch"\nruntime = "apptainer"\nimage = "{other}"\n'
    )
    swept = plan(load_experiment(experiment, accepted_images=(str(other),)), tmp_path / "s", Site.default())
    assert f"--accept-image {other}" in one_job_script(swept, "fabric-bench")


def built_digest(path) -> str:
    from containers.build_inputs import image_sha256

    return image_sha256(path)


def test_mypy_refuses_a_raw_str_at_the_runtime_mpirun_and_tc_sinks(tmp_path):
    """The container runtime's, mpirun's and tc's argv take shapes (launch.shapes): a raw str or
    int reaching one is a type error, shown on a snippet (mypy with the project's configuration)."""
    snippet = tmp_path / "raw_to_argv.py"
    snippet.write_text(
        "from pathlib import Path\n"
        "from launch import shapes\n"
        "from launch.fleet.emulate import cluster\n"
        "from launch.ranks import launchers, runtimes\n"
        "podman = runtimes.runtime_named('podman')\n"
        "podman.wrap('docker.io/attacker/evil:latest', [], {}, False, ['x'])\n"
        "runtimes.ApptainerRuntime().inspect_argv('evil.sif')\n"
        "launchers.Plan(Path('r'), podman, image='evil', hostfile='/etc/hosts')\n"
        "launchers.hostfile_args('/etc/hosts')\n"
        "cluster.tbf_args(10**9)\n"
        "cluster.htb_argv(shapes.link_rate('r', '1g'), [('10.213.0.3', 75_000_000)])\n"
    )
    proc, errors = mypy_errors(snippet)
    found = [e.split(": error: ")[1].split(";")[0] for e in errors]
    assert found == [
        'Argument 1 to "runtime_named" has incompatible type "str"',
        'Argument 1 to "wrap" of "Runtime" has incompatible type "str"',
        'Argument 1 to "inspect_argv" of "ApptainerRuntime" has incompatible type "str"',
        'Argument "image" to "Plan" has incompatible type "str"',
        'Argument "hostfile" to "Plan" has incompatible type "str"',
        'Argument 1 to "hostfile_args" has incompatible type "str"',
        'Argument 1 to "tbf_args" has incompatible type "int"',
        'List item 0 has incompatible type "tuple[str, int]"',
    ], proc.stdout[-2000:]
