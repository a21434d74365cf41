"""Rehearsals: build images here that CI cannot afford to, and record what each
build proved (`make image-rehearsal`, `make podman-rehearsal`).

    python -m containers.rehearse [FABRIC ...]     (default: REHEARSED)
    python -m containers.rehearse --podman

- cuda: the stack and its fabric images on the local CUDA base.
- podman (cpu): the stack and the ethernet image built with podman from their
  Dockerfiles (CI builds the cpu stack with Apptainer only: a second ~25 min
  source build would not fit its budget), the image's self-test run in a
  container, and a 2-rank MPI allreduce over host mpirun, one container per
  rank, with the check that no rank and no container outlived it.

A successful build writes one record per image to containers/rehearsals/
(tracked): recipe hash (podman: the Dockerfile's sha256), stack digest, base
(and the base image and Python it was built on), image sha256 and size, seconds
per stage (and per component, from the build log's timestamps), the self-test
output and what it reported (`self_test`: ompi_info, ucx_info, both Horovod
builds, nccl-tests, the NCCL plugin's libfabric), what the rehearsal omitted.
tests/containers/test_rehearsals.py fails when a current cuda recipe or cpu
Dockerfile has no record, so a recipe change cannot land without a rebuild
that proves it. A failed build records nothing: one line naming the stage and
the log, exit 2.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from containers import build, recipe, sources, stack
from containers.fabrics import HOST_FABRICS, profile

RECORDS = stack.REPO / "containers" / "rehearsals"
REHEARSED = HOST_FABRICS  # every fabric a host can have: a new profile needs its rehearsal records
SCHEMA_VERSION = 1
_STAMP = re.compile(r"^\[\s*([0-9.]+)s\] (.*)$")


PODMAN_REHEARSED = ("stack", "ethernet")


def record_path(image: str, flavour: str, recipe_hash: str, runtime: str = "apptainer") -> Path:
    runtime_part = "" if runtime == "apptainer" else f"{runtime}-"
    return RECORDS / f"{flavour}-{runtime_part}{image}-{recipe_hash[:16]}.json"


def dockerfile_hash(image: str, flavour: str = "cpu") -> str:
    """What a podman record names: the sha256 of the rendered Dockerfile (commit left out)."""
    rendered = recipe.render(image, flavour, commit="x")
    return hashlib.sha256(rendered.dockerfile.encode()).hexdigest()


def podman_hashes() -> dict[str, str]:
    return {image: dockerfile_hash(image) for image in PODMAN_REHEARSED}


def current_hashes(flavour: str = "cuda") -> dict[str, str]:
    """image name -> recipe hash of what a rehearsal here builds now."""
    omit = sources.omitted()
    out = {"stack": recipe.render_stack(flavour, base="local", omit=omit, commit="x").recipe_hash}
    for fabric in REHEARSED:
        out[fabric] = recipe.render(fabric, flavour, base="local", omit=omit, commit="x").recipe_hash
    return out


def _segments(log: Path) -> list[list[tuple[float, str]]]:
    """The log's stamped commands: one list of (seconds, line) per `$ argv`."""
    segments: list[list[tuple[float, str]]] = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("$ "):
            segments.append([(0.0, line)])
            continue
        match = _STAMP.match(line)
        if match and segments:
            segments[-1].append((float(match.group(1)), match.group(2)))
    return segments


# Where a build step starts in the log (apptainer echoes %post commands with `+ `)
_MARKS = (
    (re.compile(r"^\+ python3 -m venv "), "python stack (pip)"),
    (re.compile(r"^\+ .*build-wheel\.sh "), "horovod (build)"),
    # the second Horovod build (MPI GPU operations): after the general mark, so it takes the time
    (re.compile(r"^\+ .*HOROVOD_GPU_OPERATIONS=MPI .*build-wheel\.sh "), "horovod mpi-gpu (build)"),
    (re.compile(r"^INFO: +Creating SIF file"), "squashfs"),
)


def component_seconds(log: Path) -> dict[str, float]:
    """Seconds per build step of each `apptainer build` in the log: OS packages, each
    source-built component (from its rehearsal-wget fetch to the next step), the Python
    stack, Horovod, the squashfs."""
    by_url = {s.site_url: s.component for s in sources.SOURCES}
    out: dict[str, float] = {}
    for segment in _segments(log):
        if " build " not in segment[0][1]:
            continue
        starts: list[tuple[float, str]] = [(0.0, "os packages and copies")]
        for t, text in segment:
            if m := re.match(r"rehearsal wget: (\S+) <-", text):
                starts.append((t, by_url.get(m.group(1), m.group(1))))
            starts += [(t, name) for mark, name in _MARKS if mark.match(text)]
        end = segment[-1][0]
        for (t, name), nxt in zip(starts, [*starts[1:], (end, "")]):
            out[name] = round(out.get(name, 0.0) + nxt[0] - t, 1)
    return out


def test_output(log: Path) -> list[str]:
    tests = [seg for seg in _segments(log) if re.search(r"apptainer test ", seg[0][1])]
    return [text for _, text in tests[-1][1:]] if tests else []


_REPORT = re.compile(r"^image-test: report: ([^:]+): (.*)$")
_KEY_VALUES = re.compile(r"(\w+)=(\S+)")


def self_test_report(lines: list[str]) -> dict:
    """What the image's self-test saw, by section: its `ok:` and `FAIL:` lines, and every
    `image-test: report: SECTION: TEXT` line (ompi_info, ucx_info -v / -d, ucx modules, each
    Horovod build's `horovod OPS` lines, nccl-tests, aws-ofi-nccl) grouped under SECTION; each
    Horovod build's own report (file=... mpi_built=... cuda_built=... nccl_built=...) also as a
    dict under `horovod`."""
    out: dict = {"ok": [], "fail": [], "sections": {}, "horovod": {}}
    for line in lines:
        if line.startswith("image-test: ok: "):
            out["ok"].append(line.removeprefix("image-test: ok: "))
        elif line.startswith("image-test: FAIL: "):
            out["fail"].append(line.removeprefix("image-test: FAIL: "))
        elif match := _REPORT.match(line):
            section, text = match.groups()
            out["sections"].setdefault(section, []).append(text)
            if section.startswith("horovod ") and text.startswith("file="):
                out["horovod"][section.split(" ", 1)[1]] = dict(_KEY_VALUES.findall(text))
    return out


def _version(runtime: str) -> str:
    done = subprocess.run([build.runtime_binary(runtime), "--version"], capture_output=True, text=True)
    return done.stdout.strip()


def write_record(entry: build.ImageRecord, **more) -> Path:
    image = "stack" if entry.fabric == "stack" else entry.fabric
    log = Path(entry.log)
    podman = entry.runtime == "podman"
    built_on = stack.versions(entry.flavour, entry.base)
    record = {
        "schema_version": SCHEMA_VERSION,
        "image": image,
        "flavour": entry.flavour,
        "base": entry.base,
        # which base it was built on (the local rehearsal base is Debian + NVIDIA's CUDA wheels,
        # not the site recipe's nvidia/cuda Ubuntu 24.04 image) and the Python that base brings
        "base_image": built_on["base"],
        "base_python": built_on["python"],
        "runtime": entry.runtime,
        "recipe_hash": entry.recipe_hash,
        "stack_digest": entry.stack_digest or entry.sha256,
        "sif_sha256": entry.sha256,
        "size_bytes": entry.size_bytes,
        "stage_seconds": entry.stages,
        "stack_stage_seconds": entry.stack_stages,
        "component_seconds": component_seconds(log),
        "test_output": test_output(log),
        "omitted": entry.omitted,
        "bundle_commit": entry.bundle_commit,
        "built_at": entry.built_at,
        "apptainer": _version("apptainer"),
        "sources": (sources.sources_dir(build.cache_dir()) / "served" / "urls.tsv").read_text().splitlines()
        if entry.base == "local" or entry.flavour == "cpu"
        else [],
    }
    if podman:
        record |= {"dockerfile_hash": dockerfile_hash(image, entry.flavour), "podman": _version("podman")}
    record |= more
    # the self-test's output parsed (after `more`: a podman record brings its own test output)
    lines = record["test_output"]
    record["self_test"] = self_test_report([str(line) for line in lines] if isinstance(lines, list) else [])
    name_hash = str(record["dockerfile_hash"]) if podman else entry.recipe_hash
    path = record_path(image, entry.flavour, name_hash, entry.runtime)
    RECORDS.mkdir(parents=True, exist_ok=True)
    # one record per image: the current one
    for old in RECORDS.glob(record_path(image, entry.flavour, "*", entry.runtime).name):
        old.unlink()
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def podman_self_test(entry: build.ImageRecord) -> list[str]:
    argv = [
        build.runtime_binary("podman"),
        "run",
        "--rm",
        "--network=host",
        entry.image,
        *recipe.self_test_argv(profile(entry.fabric), entry.flavour),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=build.podman_env(), timeout=900)
    lines = (done.stdout + done.stderr).splitlines()
    if done.returncode != 0:
        raise build.BuildError(f"self-test of {entry.image} in podman failed: {lines[-1:]}")
    return lines


def podman_two_ranks(entry: build.ImageRecord) -> dict:
    """A 2-rank MPI allreduce in the image, host mpirun, one container per rank; then no rank
    pid alive and no container running."""
    with tempfile.TemporaryDirectory(prefix="fabric-bench-podman.") as results:
        argv = [
            str(Path(sys.executable).with_name("fabric-bench")),
            "run",
            "--runtime",
            "podman",
            "--image",
            entry.image,
            "--launcher",
            "mpirun",
            "--fabric",
            entry.fabric,
            "--benchmark",
            "allreduce",
            "--backend",
            "mpi",
            "--ranks",
            "2",
            "--min-bytes",
            "8",
            "--max-bytes",
            str(2**20),
            "--iters",
            "3",
            "--warmup",
            "1",
            "--results",
            results,
            "--timeout",
            "300",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        found = list(Path(results).glob("*/result.json"))
        if done.returncode != 0 or len(found) != 1:
            raise build.BuildError(
                f"2-rank run in {entry.image} failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}"
            )
        result = json.loads(found[0].read_text())
        pids = sorted(
            {json.loads(beat.read_text())["pid"] for beat in (found[0].parent / "ranks").glob("heartbeat-*.json")}
        )
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    running = subprocess.run(
        [build.runtime_binary("podman"), "ps", "-q"], capture_output=True, text=True, env=build.podman_env()
    ).stdout.split()
    return {
        "argv": argv[1:],
        "status": result["status"],
        "correct": result["correct"],
        "world_size": result["world_size"],
        "launch_argv": result["argv"],
        "image_labels": result["image"]["labels"],
        "image_stack_digest": result["image"]["stack_digest"],
        "mpi": result["versions"].get("mpi", ""),
        "rank_pids": pids,
        "ranks_alive_after": alive,
        "containers_running_after": running,
    }


def rehearse_podman() -> int:
    try:
        stack_entry = build.build_stack("cpu", "podman")
        print(write_record(stack_entry), flush=True)
        entry = build.build("ethernet", "cpu", "podman")
        tested = podman_self_test(entry)
        run = podman_two_ranks(entry)
        if run["ranks_alive_after"] or run["containers_running_after"]:
            raise build.BuildError(f"left running after the 2-rank run: {run}")
        print(write_record(entry, test_output=tested, two_ranks=run), flush=True)
    except build.BuildError as exc:
        print(f"rehearsal: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--podman"]:
        return rehearse_podman()
    fabrics = argv or list(REHEARSED)
    try:
        stack_entry = build.build_stack("cuda", base="local")
        print(write_record(stack_entry), flush=True)
        for fabric in fabrics:
            entry = build.build(fabric, "cuda", base="local")
            print(write_record(entry), flush=True)
    except build.BuildError as exc:
        print(f"rehearsal: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
