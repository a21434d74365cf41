"""Replay: re-run an archive's runs here with the same parameters, argv shape and
image, producing new results that name their original (`replay_of`).

The RunSpec is rebuilt from result["spec"]; the image must have the digest the
original recorded (a mismatch is refused unless allowed, then warned about).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from containers.files import sha256_file
from launch import archive as archives
from launch.errors import UsageError
from launch.runspec import RunSpec
from launch.runtimes import runtime_named
from launch.site import Site

SPEC_FIELDS = {f.name for f in dataclasses.fields(RunSpec)}


@dataclass
class Replay:
    original: dict
    spec: RunSpec
    warnings: list[str]


def spec_of(result: dict) -> RunSpec:
    data = result.get("spec")
    if not isinstance(data, dict):
        raise UsageError(f"result {result.get('run_id')} has no spec to replay")
    unknown = set(data) - SPEC_FIELDS
    if unknown:
        raise UsageError(f"result {result.get('run_id')}: spec fields unknown here: {', '.join(sorted(unknown))}")
    return RunSpec(**data).validated()


def argv_shape(argv: list[str], run_id: str | None) -> list[str]:
    """argv with what legitimately differs between sites abstracted: tool paths and the run directory."""
    shape = []
    for arg in argv:
        if run_id and run_id in arg:
            arg = "<run-dir>" + arg.split(run_id, 1)[1]
        elif arg.startswith("/") and "/" in arg[1:] and not arg.endswith((".sif", ".sqfs")):
            arg = "<path>/" + arg.rsplit("/", 1)[1]
        shape.append(re.sub(r"^<path>/python3(\.\d+)?$", "<path>/python", arg))
    return shape


def check_image(result: dict, spec: RunSpec, allow_mismatch: bool) -> list[str]:
    recorded = (result.get("image") or {}).get("digest")
    if not spec.image:
        return []
    current = runtime_named(spec.runtime).digest(spec.image)
    if recorded and current == recorded:
        return []
    problem = (f"image {spec.image}: digest {current or 'unknown (image absent?)'} differs from the "
               f"recorded {recorded or 'unknown'}")
    if not allow_mismatch:
        raise UsageError(problem + "; pass --allow-image-mismatch to replay anyway")
    return [problem]


def plan(archive: archives.Archive, allow_image_mismatch: bool = False) -> list[Replay]:
    results = archive.results()
    if not results:
        raise UsageError(f"archive {archive.path} holds no results")
    replays = []
    for _, result in sorted(results.items(), key=lambda item: item[1]["run_id"]):
        spec = spec_of(result)
        replays.append(Replay(result, spec, check_image(result, spec, allow_image_mismatch)))
    return replays


def run_all(archive: archives.Archive, replays: list[Replay], results_dir: Path, site: Site | None = None,
            timeout: float | None = None, echo: bool = True) -> list[dict]:
    from launch.run import execute_run, prepare

    outputs = []
    archive_sha = sha256_file(archive.path)
    for replay in replays:
        prepared = prepare(replay.spec, results_dir, site or Site.default())
        original = replay.original
        same_shape = argv_shape(prepared.command.argv, prepared.run_id) == \
            argv_shape(original.get("argv") or [], original["run_id"])
        link = {"run_id": original["run_id"], "archive": str(Path(archive.path).resolve()),
                "archive_sha256": archive_sha, "argv_shape_same": same_shape,
                "image_digest": (original.get("image") or {}).get("digest"), "warnings": replay.warnings}
        outputs.append(execute_run(replay.spec, prepared, timeout=timeout, echo=echo,
                                   annotations={"replay_of": link}))
    return outputs
