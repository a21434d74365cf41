"""Replay: re-run an archive's runs here with the same parameters, argv shape and
image, producing new results that name their original (`replay_of`).

The RunSpec is rebuilt from result["spec"] through the trust boundary (launch.trust):
fields of their declared types, no control characters, and only variables named exactly
in the allow-list with values of their shape (launch.foreign_env; others only where this
site accepts them by name). The image must have the digest the original recorded (a mismatch is refused
unless allowed, then warned about).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from containers.files import sha256_file
from launch.provenance import archive as archives
from launch import foreign_env, trust
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import runtime_named
from launch.site.config import Site

# What a replayed run takes from the archive and may reach a process, a shell line or a job script
FROM_ARCHIVE = (
    "extra_env",
    "hostfile",
    "partition",
    "account",
    "time_limit",
    "image",
    "launcher",
    "runtime",
    "fabric",
    "nodes",
    "ranks",
    "gpus_per_node",
)


@dataclass
class Replay:
    original: dict
    spec: RunSpec
    warnings: list[str]


def spec_of(result: dict) -> RunSpec:
    """The run's spec, of its declared types (what it may carry from elsewhere: `refuse_foreign`)."""
    where = f"result {result.get('run_id')}"
    if not isinstance(result.get("spec"), dict):
        raise UsageError(f"{where} has no spec to replay")
    return RunSpec.from_dict(result["spec"], where)


def refuse_foreign(spec: RunSpec, accepted_env: tuple[str, ...], where: str, hostfile_here: bool) -> None:
    """The first of the archive's variables, or its hostfile, that may not reach a run here, in one
    line: variables by the allow-list (launch.trust); a path named by another site is never used,
    so its hostfile needs this site's (`hostfile_here`: replay --hostfile gave one)."""
    trust.check_foreign_env(spec.extra_env, accepted_env, where=f"{where}: ")
    if spec.hostfile and not hostfile_here:
        raise UsageError(
            f"{where}: hostfile {spec.hostfile} is a path at the other site; replay --hostfile names this site's",
            fields=("hostfile",),
        )


def shown(spec: RunSpec, accepted_env: tuple[str, ...] = (), hostfile_here: bool = False) -> list[str]:
    """Every value a replayed run takes from the archive, one line each, each variable with
    its verdict (replay --dry-run); `hostfile_here`: the hostfile is this site's (--hostfile)."""
    lines = []
    for name in FROM_ARCHIVE:
        value = getattr(spec, name)
        if name == "extra_env":
            lines += [f"from the archive: {verdict.line()}" for verdict in foreign_env.judge_all(value, accepted_env)]
        elif name == "hostfile" and value and hostfile_here:
            lines.append(f"this site's hostfile = {value} (--hostfile)")
        elif name == "hostfile" and value:
            lines.append(
                f"from the archive: hostfile = {value}: refused (a path at the other site; "
                "replay --hostfile names this site's)"
            )
        elif value not in (None, ""):
            lines.append(f"from the archive: {name.replace('_', '-')} = {value}")
    return lines


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
    image = result.get("image")
    recorded = image.get("digest") if isinstance(image, dict) else None
    if not spec.image:
        return ["no image: the run uses this host's software, which no digest checks"]
    current = runtime_named(spec.runtime).digest(spec.image)
    if recorded and current == recorded:
        return []
    problem = (
        f"image {spec.image}: digest {current or 'unknown (image absent?)'} differs from the "
        f"recorded {recorded or 'unknown'}"
    )
    if not allow_mismatch:
        raise UsageError(problem + "; pass --allow-image-mismatch to replay anyway")
    return [problem]


def plan(
    archive: archives.Archive,
    allow_image_mismatch: bool = False,
    accepted_env: tuple[str, ...] = (),
    image: str | None = None,
    fabric: str | None = None,
    refuse_now: bool = True,
    hostfile: str | None = None,
) -> list[Replay]:
    """The runs to replay. `image`: this site's copy of the archive's image (a pulled one), used
    only where its digest is the one the run recorded; `fabric`: this site's fabric instead of
    the archive's (the same work on another network: what two sites compare); `hostfile`:
    this site's, for runs that named one; `refuse_now`: False only to show every variable's
    and path's verdict before refusing (replay --dry-run calls `refuse_foreign` itself)."""
    results = archive.results()
    if not results:
        raise UsageError(f"archive {archive.path} holds no results")
    replays = []
    for _, result in sorted(results.items(), key=lambda item: item[1]["run_id"]):
        spec = spec_of(result)
        if refuse_now:
            refuse_foreign(spec, accepted_env, f"result {result['run_id']}", hostfile_here=hostfile is not None)
        changes: dict[str, Any] = {}
        if image and spec.image:
            changes["image"] = image
        if fabric:
            changes["fabric"] = fabric
        if hostfile and spec.hostfile:
            changes["hostfile"] = hostfile
        if changes:
            spec = dataclasses.replace(spec, **changes).validated()
        replays.append(Replay(result, spec, check_image(result, spec, allow_image_mismatch)))
    return replays


def run_all(
    archive: archives.Archive,
    replays: list[Replay],
    results_dir: Path,
    site: Site | None = None,
    timeout: float | None = None,
    echo: bool = True,
) -> list[dict]:
    from launch.runs.run import execute_run, prepare

    outputs = []
    archive_sha = sha256_file(archive.path)
    signed_by = archive.provenance().line()
    for replay in replays:
        prepared = prepare(replay.spec, results_dir, site or Site.default())
        original = replay.original
        same_shape = argv_shape(prepared.command.argv, prepared.run_id) == argv_shape(
            [a for a in original.get("argv") or [] if isinstance(a, str)]
            if isinstance(original.get("argv"), list)
            else [],
            original["run_id"],
        )
        recorded_image = original["image"] if isinstance(original.get("image"), dict) else {}
        link = {
            "run_id": original["run_id"],
            "archive": str(Path(archive.path).resolve()),
            "archive_sha256": archive_sha,
            "argv_shape_same": same_shape,
            "image_digest": recorded_image.get("digest"),
            "warnings": replay.warnings,
            "signed_by": signed_by,
        }
        outputs.append(execute_run(replay.spec, prepared, timeout=timeout, echo=echo, annotations={"replay_of": link}))
    return outputs
