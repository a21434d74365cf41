"""Rehearsals: build the cuda stack and its fabric images here on the local base,
and record what each build proved (`make image-rehearsal`).

    python -m containers.rehearse [FABRIC ...]     (default: REHEARSED)

A successful build writes one record per image to containers/rehearsals/
(tracked): recipe hash, stack digest, base, sif sha256 and size, seconds per
stage (and per component, from the build log's timestamps), the %test output,
what the rehearsal omitted. tests/containers/test_rehearsals.py fails when a
current cuda recipe hash has no record, so a recipe change cannot land
without a rebuild that proves it. A failed build records nothing: one line
naming the stage and the log, exit 2.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from containers import build, recipe, sources, stack

RECORDS = stack.REPO / "containers" / "rehearsals"
REHEARSED = ("ethernet", "infiniband", "omnipath", "efa", "slingshot")
SCHEMA_VERSION = 1
_STAMP = re.compile(r"^\[\s*([0-9.]+)s\] (.*)$")


def record_path(image: str, flavour: str, recipe_hash: str) -> Path:
    return RECORDS / f"{flavour}-{image}-{recipe_hash[:16]}.json"


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
_MARKS = ((re.compile(r"^\+ python3 -m venv "), "python stack (pip)"),
          (re.compile(r"^\+ .*build-wheel\.sh "), "horovod (build)"),
          (re.compile(r"^INFO: +Creating SIF file"), "squashfs"))


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
            if (m := re.match(r"rehearsal wget: (\S+) <-", text)):
                starts.append((t, by_url.get(m.group(1), m.group(1))))
            starts += [(t, name) for mark, name in _MARKS if mark.match(text)]
        end = segment[-1][0]
        for (t, name), nxt in zip(starts, [*starts[1:], (end, "")]):
            out[name] = round(out.get(name, 0.0) + nxt[0] - t, 1)
    return out


def test_output(log: Path) -> list[str]:
    tests = [seg for seg in _segments(log) if re.search(r"apptainer test ", seg[0][1])]
    return [text for _, text in tests[-1][1:]] if tests else []


def _apptainer_version() -> str:
    done = subprocess.run([build.runtime_binary("apptainer"), "--version"], capture_output=True, text=True)
    return done.stdout.strip()


def write_record(entry: build.ImageRecord) -> Path:
    image = "stack" if entry.fabric == "stack" else entry.fabric
    log = Path(entry.log)
    record = {
        "schema_version": SCHEMA_VERSION, "image": image, "flavour": entry.flavour,
        "base": entry.base, "runtime": entry.runtime, "recipe_hash": entry.recipe_hash,
        "stack_digest": entry.stack_digest or entry.sha256, "sif_sha256": entry.sha256,
        "size_bytes": entry.size_bytes, "stage_seconds": entry.stages,
        "stack_stage_seconds": entry.stack_stages, "component_seconds": component_seconds(log),
        "test_output": test_output(log), "omitted": entry.omitted,
        "bundle_commit": entry.bundle_commit, "built_at": entry.built_at,
        "apptainer": _apptainer_version(),
        "sources": (sources.sources_dir(build.cache_dir()) / "served" / "urls.tsv").read_text().splitlines()
        if entry.base == "local" else [],
    }
    path = record_path(image, entry.flavour, entry.recipe_hash)
    RECORDS.mkdir(parents=True, exist_ok=True)
    for old in RECORDS.glob(f"{entry.flavour}-{image}-*.json"):   # one record per image: the current one
        old.unlink()
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def main(argv: list[str]) -> int:
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
