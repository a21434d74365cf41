"""Every command line in README.md and docs/ runs: a documented line that stops working fails CI.

The shell blocks of README.md, then of the docs in DOCS_ORDER, then of any other
docs/**/*.md by name, are run in that order, as a new user would paste them, in
a scratch directory that looks like the checkout (its top-level entries linked,
so results, site.toml, reports and archives land in the scratch directory). Long
jobs run with small sizes appended (the last value of an option wins); lines
that need what this machine cannot have are listed with the reason, and that
list must be exactly the lines that name such things. Each command line appears
once across the README and the docs (a page links to another's instead), so
nothing runs twice; a line whose whole path another test runs for real (with
more assertions) runs here with --dry-run, and a sweep whose results other tests
read too is swept once per session (tests/conftest.py).

`make check` runs the quick form: every `run` and `sweep` line with --dry-run,
and the lines that take seconds as they are.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, VENV_BIN, need

# The order a user follows: later pages use what earlier ones made (site.toml, the image,
# results/sweeps/cpu-small and cpu-emulated). Docs with shell blocks not listed run after these.
DOCS_ORDER = (
    "README.md",
    "docs/running.md",
    "docs/images.md",
    "docs/site.md",
    "docs/emulated.md",
    "docs/sweeps.md",
    "docs/verdicts.md",
    "docs/predict.md",
    "docs/results.md",
    "docs/gpu.md",
)
TINY_TRAIN = "--image-size 32 --batch-size 4 --warmup 1 --iters 2 --batches-per-iter 1"
# What this machine cannot have: a Slurm allocation at a site, GPUs, cuda images
# (hours to build; see the image rehearsals), or the suite itself.
CANNOT_HAVE = re.compile(
    r"--launcher (sbatch|srun)|--one-job|--gpus-per-node [1-9]|FLAVOUR=(cuda|cpu)\b(?!-)"
    r"|^make test\b|^make (image|podman)-rehearsal\b"
)
NOT_RUN = {
    "make test": "it is the command running this test",
    "fabric-bench sweep experiments/hpec2020.experiment.toml --site site.toml --launcher sbatch --one-job": "needs a Slurm cluster at a site with the study's fabrics (the test Slurm cluster runs "
    "tests/integration/test_slurm.py)",
    "make image FABRIC=efa FLAVOUR=cuda BASE=local": "the cuda stack builds from source for hours on this 2-core machine (the rehearsal, "
    "`make image-rehearsal`, records it); tests/containers render it and check the local base",
    "make image FABRIC=ethernet FLAVOUR=cpu RUNTIME=apptainer": "the site stack from source, ~35 min on 2 cores: beyond CI's budget beside the tests (CI builds "
    "FLAVOUR=cpu-debian); the podman rehearsal's records prove the same recipe",
    "make image-rehearsal": "builds the cuda stack and five fabric images from source: hours on 2 cores, "
    "longer than CI's whole budget; its records are checked instead",
    "make podman-rehearsal": "a second ~25 min source build of the cpu stack (podman's), beyond CI's budget; "
    "its records are checked instead",
}
# Long jobs, made small: README line prefix -> arguments appended.
SMALLER = {
    # two rounds of the four arms, not five: the fewest that give the paired ratios and their intervals
    "make bench": f'BENCH_ARGS="{TINY_TRAIN} --ranks 1,2 --rounds 2"',
    # no 3 s quiet check before the runs (tests/integration/test_end_to_end.py checks it, on a sweep too),
    # and each point measured once: on a loaded host (CI's other worker) every point was disturbed and
    # measured twice more, 11 runs instead of 4 (tests/launch/test_sweep.py checks the measuring again)
    "fabric-bench sweep experiments/cpu-small.experiment.toml": "--quiet-check 0 --remeasure-disturbed 0",
    "fabric-bench run --site site.toml": TINY_TRAIN,
    ".venv/bin/fabric-bench run --launcher emulated --nodes 2 --fabric": TINY_TRAIN,
    ".venv/bin/fabric-bench run --launcher emulated --nodes 2 --link-rate 1gbit --benchmark halo": "--iters 3",
}
# Lines whose whole path another test runs for real, with more assertions: here they run with
# --dry-run (their options, files and plan checked), so no path runs twice. Prefix -> that test.
END_TO_END_TEST = "tests/integration/test_end_to_end.py::test_sweep_report_archive_replay_compare"
SLURM_PAGE_TEST = "tests/integration/test_emulated_slurm.py::test_a_sweep_and_ddp_cross_the_shaped_links_and_locate_names_nothing_on_a_healthy_cluster"
RUN_ELSEWHERE = {
    ".venv/bin/fabric-bench run --engine horovod --model resnet18 --ranks 2": "tests/integration/test_torch_training.py"
    "::test_two_ranks_train_to_identical_parameters",
    # DDP's ResNet-50 at 2 ranks on this host's CPU: the GPU check's --cpu mode runs it for real (its 2-rank run)
    ".venv/bin/fabric-bench run --engine ddp --model resnet50 --ranks 2": "tests/benchmarks/test_gpu_check.py"
    "::test_cpu_mode_end_to_end",
    "fabric-bench run --site site.toml --runtime apptainer": "tests/integration/test_image_run.py"
    "::test_two_ranks_in_the_image_over_ethernet_with_host_mpirun",
    ".venv/bin/fabric-bench run --launcher emulated --nodes 2 --link-rate 1gbit --benchmark allreduce": "tests/launch/"
    "test_emulate.py::test_allreduce_busbw_follows_the_shaped_rate",
    ".venv/bin/fabric-bench run --launcher emulated --nodes 2 --fabric": "tests/launch/test_emulate.py"
    "::test_training_across_namespaces_ends_with_identical_parameters",
    ".venv/bin/fabric-bench run --launcher emulated --nodes 2 --link-rate 1gbit --benchmark halo": "tests/launch/"
    "test_emulate.py::test_halo_across_namespaces_matches_one_rank",
    "fabric-bench sweep experiments/cpu-emulated.experiment.toml": "tests/integration/test_study_emulated.py"
    "::test_emulated_sweep_report_opens_with_the_verdict",
}
# Lines with no --dry-run whose whole path another slow test runs for real, on the same kind of
# cluster or with every step: not run here (each still documented once, its test still there and
# slow). The emulated Slurm page is one block (its sweep needs the cluster its first lines bring
# up): test_emulated_slurm brings up the same 4-node cluster, sweeps it and runs `locate`.
RUN_BY_THEIR_TEST = {
    ".venv/bin/fabric-bench emulate up --nodes 4 --link 300mbit --slurm --name doc": SLURM_PAGE_TEST,
    ".venv/bin/fabric-bench site init --emulated doc": SLURM_PAGE_TEST,
    "SLURM_CONF=/run/fabric-bench/emulate/doc.slurm/slurm.conf sinfo": SLURM_PAGE_TEST,
    "SLURM_CONF=/run/fabric-bench/emulate/doc.slurm/slurm.conf .venv/bin/fabric-bench sweep": SLURM_PAGE_TEST,
    "SLURM_CONF=/run/fabric-bench/emulate/doc.slurm/slurm.conf .venv/bin/fabric-bench locate": SLURM_PAGE_TEST,
    ".venv/bin/fabric-bench emulate down doc": SLURM_PAGE_TEST,
    # the check's every step, torchvision's runs included: test_gpu_check runs it whole
    "benchmarks/gpu_check.sh --cpu": "tests/benchmarks/test_gpu_check.py::test_cpu_mode_end_to_end",
    # an archive replayed and compared with its original (25 s here): the end-to-end test's round trip,
    # every replay checked against its original run; this test still archives, and replays with --dry-run
    "fabric-bench replay cpu-small.tar.gz --results replays/": END_TO_END_TEST,
    "fabric-bench compare results/sweeps/cpu-small replays/": END_TO_END_TEST,
}
# Of the lines RUN_ELSEWHERE, the sweeps whose results later lines read: the session's one sweep of that experiment
# (tests/conftest.py cpu_emulated_sweep) is copied where the line would have written it.
SWEPT_ONCE = {"fabric-bench sweep experiments/cpu-emulated.experiment.toml": "results/sweeps/cpu-emulated"}
# make check: these run as they are (seconds each); every other `run` and `sweep` line with --dry-run
QUICK = (
    "fabric-bench probe",
    "fabric-bench site init --output",
    "fabric-bench image render",
    "fabric-bench image list",
)
DRY_RUN = re.compile(r"^(\.venv/bin/)?fabric-bench (run|sweep) ")
EXIT_CODES = {  # lines whose documented outcome may be a non-zero exit
    "fabric-bench compare": {0, 1},  # 1: not within the tolerance (tiny runs on 2 shared cores are noisy)
}


def readme_lines(text: str) -> list[str]:
    """Command lines of the ```sh blocks, continuation lines joined, comments kept (bash drops them)."""
    lines, block = [], None
    for raw in text.splitlines():
        if raw.startswith("```"):
            block = [] if block is None and raw.strip() in ("```sh", "```bash") else None
            continue
        if block is None:
            continue
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1].rstrip() + " " + raw.strip()
        elif raw.strip() and not raw.lstrip().startswith("#"):
            lines.append(raw.strip())
    return lines


def documents() -> list[Path]:
    """README.md, the docs in DOCS_ORDER, then every other docs page by name."""
    listed = [REPO / name for name in DOCS_ORDER]
    others = sorted(p for p in (REPO / "docs").rglob("*.md") if p not in listed)
    return [*listed, *others]


def documented_lines() -> list[tuple[str, str]]:
    """(page, command line) of every shell block, in the order they run."""
    return [(str(page.relative_to(REPO)), line) for page in documents() for line in readme_lines(page.read_text())]


def without_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line)


def made_small(line: str) -> str:
    command = without_comment(line)
    if "--dry-run" in command:
        return command
    if command.startswith(tuple(RUN_ELSEWHERE)):
        return f"{command} --dry-run"
    for prefix, extra in SMALLER.items():
        if command.startswith(prefix):
            return f"{command} {extra}".strip()
    return command


def scratch_checkout(tmp_path: Path) -> Path:
    work = tmp_path / "checkout"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git", "results", ".venv"):
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(VENV_BIN.parent)  # wherever VENV put it
    return work


def shell_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        "FABRIC_BENCH_STORE": str(tmp_path / "store.sqlite"),
    }


def run_line(page: str, command: str, work: Path, env: dict[str, str]) -> None:
    """One documented line in bash, as pasted; fails the test with its output unless its exit is allowed."""
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    allowed = next((codes for prefix, codes in EXIT_CODES.items() if command.startswith(prefix)), {0})
    assert proc.returncode in allowed, (
        f"{page} line failed (exit {proc.returncode}): {command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    print(f"{time.monotonic() - started:7.1f} s  {command}", flush=True)


def test_the_lines_not_run_are_exactly_those_naming_what_this_machine_lacks():
    lines = [without_comment(line) for _, line in documented_lines()]
    assert set(NOT_RUN) == {line for line in lines if CANNOT_HAVE.search(line)}
    assert set(NOT_RUN) <= set(lines), "a NOT_RUN entry is no longer in the README or docs"


def test_each_command_line_appears_once_across_the_readme_and_docs():
    assert all((REPO / name).is_file() for name in DOCS_ORDER), "a DOCS_ORDER page is missing"
    seen: dict[str, str] = {}
    for page, line in documented_lines():
        command = without_comment(line)
        assert command not in seen, f"{command!r} is in {seen[command]} and {page}: link to it instead"
        seen[command] = page


def test_each_line_run_elsewhere_is_one_line_that_test_runs_for_real():
    lines = [without_comment(line) for _, line in documented_lines()]
    for prefix, nodeid in {**RUN_ELSEWHERE, **RUN_BY_THEIR_TEST}.items():
        assert sum(line.startswith(prefix) for line in lines) == 1, f"{prefix!r} must match one documented line"
        path, name = nodeid.split("::")
        source = (REPO / path).read_text()
        assert f"\ndef {name}(" in source, f"{nodeid} is gone: run {prefix!r} here again"
        assert "pytest.mark.slow" in source  # it runs in make test, as this test does
    assert set(SWEPT_ONCE) <= set(RUN_ELSEWHERE)


def test_the_run_and_sweep_lines_in_dry_run_and_the_quick_lines_run(tmp_path):
    """make check's README: every `run` and `sweep` line a user can paste here checked with --dry-run
    (its options, the experiment file, the runs it plans), and the quick lines run as they are."""
    work = scratch_checkout(tmp_path)
    env = shell_env(tmp_path)
    dry, quick = [], []
    for page, line in documented_lines():
        command = without_comment(line)
        if command in NOT_RUN or "$(" in command:  # the README's image: built by make test, not here
            continue
        if command.startswith(QUICK):
            run_line(page, command, work, env)
            quick.append(command)
        elif DRY_RUN.match(command):
            run_line(page, command if "--dry-run" in command else f"{command} --dry-run", work, env)
            dry.append(command)
    assert len(quick) == len(QUICK) and len(dry) >= 8, (quick, dry)


@pytest.mark.slow
def test_every_other_readme_line_runs(tmp_path, cpu_ethernet_image, cpu_emulated_sweep):
    need(os.geteuid() == 0 and shutil.which("tc") is not None, "the README's emulated fabrics need root and tc")
    work = scratch_checkout(tmp_path)
    env = shell_env(tmp_path)
    before = {p.pid for p in psutil.process_iter()}
    ran = []
    for page, line in documented_lines():
        if without_comment(line) in NOT_RUN or without_comment(line).startswith(tuple(RUN_BY_THEIR_TEST)):
            continue
        command = made_small(line)
        run_line(page, command, work, env)
        ran.append(command)
        swept = next((folder for prefix, folder in SWEPT_ONCE.items() if command.startswith(prefix)), None)
        if swept:
            shutil.copytree(cpu_emulated_sweep.directory, work / swept, dirs_exist_ok=True)
    assert len(ran) >= 20
    # every line's processes ended with it
    left = [
        p
        for p in psutil.process_iter(["pid", "cmdline"])
        if p.pid not in before and str(work) in " ".join(p.info["cmdline"] or [])
    ]
    assert not left, [p.info["cmdline"] for p in left]
