"""Shared test helpers.

`need(ok, why)` skips a test when a component is missing on a user's machine;
under CI (CI=true) a missing component is a failure, because CI installs all,
and so is any other skip.

Every test's time (setup + call + teardown) goes to $FABRIC_BENCH_TEST_DURATIONS
when it is set (`make test` and `make check` set it), slowest first; CHECK names
the tiny real-process runs `make check` adds to the unit tests.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Runs index their results (launch.results.store): keep tests out of the user's history,
# in a folder of this session's own that goes with it.
if "FABRIC_BENCH_STORE" not in os.environ:
    _STORE_DIR = tempfile.mkdtemp(prefix="fabric-bench-store-")
    atexit.register(shutil.rmtree, _STORE_DIR, True)
    os.environ["FABRIC_BENCH_STORE"] = str(Path(_STORE_DIR) / "results.sqlite")
VENV_BIN = Path(sys.executable).parent
UNDER_CI = os.environ.get("CI", "").lower() == "true"


def need(ok: bool, why: str) -> None:
    if ok:
        return
    if UNDER_CI:
        pytest.fail(f"CI must provide this: {why}")
    pytest.skip(why)


def alive(pids) -> set[int]:
    """The pids among `pids` still running (a zombie has ended: only its parent's wait is left)."""
    import psutil

    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return {pid for pid in pids if running(pid)}


def rank_pids(results_dir: Path) -> set[int]:
    """Every rank's pid the runs under `results_dir` recorded (RUN/ranks/rank-*.jsonl), to check
    with `alive` that none outlived its run."""
    return {
        json.loads(line)["pid"]
        for path in results_dir.glob("*/ranks/rank-*.jsonl")
        for line in path.read_text().splitlines()
    }


def fabric_bench(*args: str, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    """Run the installed `fabric-bench` command for real."""
    return subprocess.run(
        [str(VENV_BIN / "fabric-bench"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=kwargs.pop("cwd", REPO),
        **kwargs,
    )


# The image flavour the tests build and run (.ci/run builds the same): Debian's packaged
# communication stack, minutes cold. The cpu flavour's source-built site stack takes ~35 min
# on 2 cores, beyond CI's budget beside the tests; its podman rehearsal records prove it.
# A GPU cluster's site file (issue 49): Slurm with a GPU partition, Apptainer, and the fabrics the
# shipped experiments name (Ethernet, a 4-rail InfiniBand node, Omni-Path)
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


@pytest.fixture
def gpu_site(tmp_path) -> Path:
    """GPU_SITE as a file."""
    path = tmp_path / "gpu-site.toml"
    path.write_text(GPU_SITE)
    return path


IMAGE_FLAVOUR = "cpu-debian"


@pytest.fixture(scope="session")
def cpu_ethernet_image():
    """containers.build.ImageRecord of the IMAGE_FLAVOUR/ethernet Apptainer image (a .sif),
    built once per session (builds are cached by their inputs in the fabric-bench cache dir)."""
    from containers import build

    need(shutil.which("apptainer") is not None, "apptainer not installed (CI: scripts/provision-apptainer.sh)")
    need(shutil.which("debootstrap") is not None, "debootstrap not installed (the cpu base image)")
    try:
        return build.build("ethernet", IMAGE_FLAVOUR, "apptainer", progress=lambda line: None)
    except build.BuildError as exc:
        pytest.fail(f"building the {IMAGE_FLAVOUR} ethernet image: {exc}")


@dataclass(frozen=True)
class Swept:
    directory: Path  # the sweep's folder (summary.json, runs/): read it, do not write into it
    process: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def cpu_emulated_sweep(tmp_path_factory) -> Swept:
    """experiments/cpu-emulated.experiment.toml swept once per session (ddp and horovod over emulated
    1 and 10 Gbit/s links, 1 and 2 nodes: minutes on 2 cores), for the tests that only read it: the
    study's verdict (tests/integration/test_study_emulated.py) and the README's pages after it."""
    need(os.geteuid() == 0 and shutil.which("tc") is not None, "emulated fabrics need root and tc")
    directory = tmp_path_factory.mktemp("cpu-emulated") / "sweep"
    proc = fabric_bench(
        "sweep",
        "experiments/cpu-emulated.experiment.toml",
        "--dir",
        str(directory),
        "--remeasure-disturbed",
        "0",
        "--keep-disturbed",
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return Swept(directory, proc)


# `make check` (-m "not slow or check"): the unit tests (the README's lines in --dry-run among
# them), and these tiny real runs of the main paths: a 2-rank training run per engine, an allreduce
# to 64 KiB, a halo, an emulated 2-node cluster and an emulated 2-node Slurm cluster (one for both).
CHECK = frozenset(
    {
        "tests/integration/test_torch_training.py::test_two_ranks_train_to_identical_parameters[ddp-mpi]",
        "tests/integration/test_torch_training.py::test_two_ranks_train_to_identical_parameters[horovod-mpi]",
        "tests/integration/test_tf_training.py::test_two_ranks_train_to_identical_variables[native]",
        "tests/bench/test_allreduce.py::test_allreduce_runs_and_checks_values[torch]",
        "tests/bench/test_halo.py::test_halo_decomposed_equals_one_rank",
        "tests/launch/test_emulate.py::test_emulate_up_is_used_by_runs_and_leftovers_are_refused",
        "tests/integration/test_emulated_slurm.py::TestTwoHealthyNodes"
        "::test_a_second_slurm_cluster_and_bad_faults_are_refused_in_one_line",
        "tests/integration/test_emulated_slurm.py::TestTwoHealthyNodes"
        "::test_a_sweep_as_one_batch_job_runs_its_points_as_steps_across_the_nodes",
    }
)


# `make test` runs the slow tests of these files two at a time (-n 2, a file's tests on one worker):
# they time nothing and read no quiet machine (training identity, signals and time limits, heartbeats,
# image builds and runs, registries, sites sharing images and results, plug-in kinds, the GPU check's CPU mode),
# so a neighbour only slows them. Every other slow test runs alone: timings, shaped links, quiet
# checks, disturbance verdicts, locate, baselines. A new slow file runs alone until it is named here.
# The host Slurm's srun runs stay alone: beside another MPI job, a rank of theirs segfaulted in Open
# MPI 4.1's vader BTL at MPI_Finalize in the last 2 cold runs here (Open MPI issue #7642).
SIDE_BY_SIDE = frozenset(
    {
        "tests/integration/test_signals.py",
        "tests/integration/test_heartbeat_runs.py",
        "tests/integration/test_torch_training.py",
        "tests/integration/test_tf_training.py",
        "tests/integration/test_image_run.py",
        "tests/containers/test_image_build.py",
        "tests/containers/test_registry_roundtrip.py",
        "tests/containers/test_manifest.py",
        "tests/containers/test_sbom.py",
        "tests/sharing/test_publish_pull.py",
        "tests/bench/test_allreduce.py",
        "tests/bench/test_collective.py",
        "tests/bench/test_alltoall.py",
        "tests/bench/test_halo.py",
        "tests/benchmarks/test_train_engines.py",
        "tests/benchmarks/test_gpu_check.py",
        "tests/benchmarks/test_two_sites.py",  # its verdict is printed, not asserted: stacks, digests, clean-up
        "tests/benchmarks/test_three_sites.py",  # one allreduce at A (no baseline): publishing, refusals, the page
        "tests/launch/test_transport.py",
        "tests/launch/test_preflight.py",
        "tests/security/test_hostile_locate.py",
        "tests/scripts/test_setup.py",
        "tests/scripts/test_test_suite.py",
        # single tests of a file whose others read the machine: processes and records, no quiet check,
        # no re-measure (--quiet-check 0 --remeasure-disturbed 0)
        "tests/launch/test_sweep.py::test_runs_past_their_time_limit_are_killed_with_all_ranks_and_the_sweep_goes_on",
        "tests/launch/test_sweep.py::test_interrupted_sweep_keeps_finished_results_and_the_rerun_runs_only_the_rest",
    }
)
# Of those, the files that share something a neighbour must not touch at once run one after another
# on one worker (`--dist loadgroup`, by group): GBs of disk (an image build's sandbox and SIF, a
# registry's copy of two 4.2 GiB images and a pulled one, twice)
SHARE_A_WORKER = {
    "disk": frozenset(
        {
            "tests/containers/test_image_build.py",
            "tests/containers/test_registry_roundtrip.py",
            "tests/benchmarks/test_two_sites.py",
        }
    ),
}


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Markers from what a test uses, so a subset can be chosen (`-m "not image"`, `-m slurm`):
    integration by its folder, image by the image fixture, slurm by the Slurm cluster module,
    root by what needs it (namespaces, daemons, image builds: a test that asks for euid 0); and
    the side-by-side lane's worker groups (a file each, the disk-heavy files one group)."""
    import inspect

    for item in items:
        path = Path(str(item.fspath))
        if "integration" in path.parts:
            item.add_marker(pytest.mark.integration)
        if "cpu_ethernet_image" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.image)
        if path.name in ("test_slurm.py", "test_emulated_slurm.py") and "integration" in path.parts:
            item.add_marker(pytest.mark.slurm)
        function = getattr(item, "function", None)
        try:
            asks_root = function is not None and "geteuid() == 0" in inspect.getsource(function)
        except (OSError, TypeError):
            asks_root = False
        if asks_root or any(item.get_closest_marker(m) for m in ("slurm", "image")):
            item.add_marker(pytest.mark.root)
        if item.nodeid in CHECK:
            item.add_marker(pytest.mark.check)
        test_file = item.nodeid.split("::")[0]
        if item.get_closest_marker("slow") and SIDE_BY_SIDE & {test_file, item.nodeid.split("[")[0]}:
            item.add_marker(pytest.mark.side_by_side)
            group = next((name for name, files in SHARE_A_WORKER.items() if test_file in files), test_file)
            item.add_marker(pytest.mark.xdist_group(group))
    named = SIDE_BY_SIDE.union(*SHARE_A_WORKER.values())
    missing = sorted(f for f in named if not (REPO / f.split("::")[0]).is_file())
    if missing:  # a renamed file would run alone again, silently slower
        raise pytest.UsageError(f"tests/conftest.py SIDE_BY_SIDE names files that are not there: {missing}")
    # a CHECK entry whose test was renamed would leave make check without it, silently
    collected = {item.nodeid for item in items}
    files = {nodeid.split("::")[0] for nodeid in collected}
    if not any("::" in arg for arg in config.args):
        stale = [nodeid for nodeid in CHECK if nodeid.split("::")[0] in files and nodeid not in collected]
        if stale:
            raise pytest.UsageError(f"tests/conftest.py CHECK names tests that are not there: {stale}")
        functions = {nodeid.split("[")[0] for nodeid in collected}
        gone = [n for n in SIDE_BY_SIDE if "::" in n and n.split("::")[0] in files and n not in functions]
        if gone:  # a renamed test would run alone again, silently slower
            raise pytest.UsageError(f"tests/conftest.py SIDE_BY_SIDE names tests that are not there: {gone}")


def failed_if_skipped_under_ci(report) -> None:
    if UNDER_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome, report.longrepr = "failed", f"skipped under CI, where nothing may be: {reason}"


def pytest_collectreport(report):
    """A whole module skipped (a module-level importorskip) fails under CI too."""
    failed_if_skipped_under_ci(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed image build names its log, which CI's clean machine throws away: the log's
    last lines go into the failure report, so CI's output says why the build failed. Under CI
    nothing is skipped silently: CI installs everything a test may need, so a skip (a skipif, an
    importorskip) fails there with its reason."""
    outcome = yield
    report = outcome.get_result()
    # the markers, for the durations file (xdist carries user_properties to the controller; keywords
    # would also hold parameter ids, such as a test's "image" case)
    marks = ",".join(m for m in DURATION_MARKERS if item.get_closest_marker(m))
    report.user_properties.append(("fabric_bench_markers", marks))
    failed_if_skipped_under_ci(report)
    if call.excinfo is None or call.excinfo.typename != "BuildError":
        return
    match = re.search(r"log: (.+)$", str(call.excinfo.value))
    log = Path(match.group(1)) if match else None
    if log and log.is_file():
        tail = log.read_text(errors="replace").splitlines()[-60:]
        report.sections.append(("build log, last 60 lines", "\n".join(tail)))


# Every test's seconds, setup + call + teardown, by node id (and its outcome and markers), written
# slowest first to $FABRIC_BENCH_TEST_DURATIONS when the session ends.
_SECONDS: dict[str, list] = {}
DURATION_MARKERS = ("slow", "check", "image", "slurm")


def pytest_runtest_logreport(report):
    nodeid = re.sub(r"@[\w/.-]+$", "", report.nodeid)  # less the worker group --dist loadgroup appends
    seconds, outcome, marks, ended = _SECONDS.setdefault(nodeid, [0.0, "passed", "", False])
    if report.failed or (report.skipped and outcome == "passed"):
        outcome = report.outcome if report.when == "call" or report.skipped else "error"
    marks = marks or dict(report.user_properties).get("fabric_bench_markers", "")
    _SECONDS[nodeid] = [seconds + report.duration, outcome, marks, ended or report.when == "teardown"]


def durations_table() -> list[tuple[str, float, str, str]]:
    """(node id, seconds, outcome, markers) of every test that ran, slowest first; a test the
    session's end cut short (an interrupt) reads "unfinished"."""
    rows = [(n, s, o if ended else "unfinished", m) for n, (s, o, m, ended) in _SECONDS.items()]
    return sorted(rows, key=lambda row: -row[1])


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get("FABRIC_BENCH_TEST_DURATIONS")
    rows = durations_table()
    if not path or not rows:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write("# seconds\toutcome\tmarkers\ttest (setup + call + teardown; slowest first)\n")
        f.writelines(f"{s:.2f}\t{o}\t{m or '-'}\t{n}\n" for n, s, o, m in rows)
    write = terminalreporter.write_line
    terminalreporter.section("the 25 slowest tests (setup + call + teardown)")
    for nodeid, seconds, outcome, _ in rows[:25]:
        write(f"{seconds:8.1f} s  {nodeid}" + ("" if outcome == "passed" else f"  ({outcome})"))
    slow = sum(s for _, s, _, m in rows if "slow" in m.split(","))
    total = sum(s for _, s, _, _ in rows)
    write(f"tests: {len(rows)}, {total:.0f} s in all ({slow:.0f} s in slow tests); every test's time: {out}")
