"""Replay: re-run an archive's runs here with the same parameters and argv shape, producing
new results that name their original (`replay_of`).

The RunSpec is rebuilt from result["spec"] through the trust boundary (launch.trust):
fields of their declared types, no control characters, and only variables named exactly
in the allow-list with values of their shape (launch.foreign_env; others only where this
site accepts them by name). What names a file or a program here is this site's choice, never
the archive's: the image and its runtime (replay --image, --runtime or the site file's), the
hostfile (--hostfile). The archive's image reference and digest are only compared against:
the local image must have the recorded digest (a mismatch is refused unless allowed, then
warned about), and the archive's path or reference is never read, hashed or run.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from containers.files import sha256_file
from containers.untrusted import UntrustedInput, regular_file
from launch.provenance import archive as archives
from launch import foreign_env, shapes, trust
from launch.errors import UsageError
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import HOST, runtime_name, runtime_named
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
    spec: RunSpec  # what runs here: the archive's fields with this site's image, runtime, hostfile, fabric
    warnings: list[str]
    foreign: RunSpec | None = None  # the archive's spec as read (None: spec is it)
    changes: dict[str, str] = field(default_factory=dict)  # field -> how this site took or replaced it, why
    refused: str | None = None  # why it cannot run here (dry-run plans it to show it, then refuses)


def spec_of(result: dict) -> RunSpec:
    """The run's spec, of its declared types (what it may carry from elsewhere: `refuse_foreign`)."""
    where = f"result {result.get('run_id')}"
    if not isinstance(result.get("spec"), dict):
        raise UsageError(f"{where} has no spec to replay")
    return RunSpec.from_dict(result["spec"], where)


def image_refusal(spec: RunSpec, where: str) -> str:
    return (
        f"{where}: ran in the image {spec.image!r} ({spec.runtime}), which is never run here: "
        "replay --image names this site's copy (`image pull` checks one by digest)"
    )


def refuse_foreign(
    spec: RunSpec, accepted_env: tuple[str, ...], where: str, hostfile_here: bool, image_here: bool = True
) -> None:
    """The first of the archive's variables, its hostfile or its image that may not reach a run here,
    in one line: variables by the allow-list (launch.trust); a path or image named by another site
    is never used, so its hostfile needs this site's (`hostfile_here`: replay --hostfile gave one),
    and a run in an image needs this site's (`image_here`: --image, or --runtime host)."""
    trust.check_foreign_env(spec.extra_env, accepted_env, where=f"{where}: ")
    if spec.hostfile and not hostfile_here:
        raise UsageError(
            f"{where}: hostfile {spec.hostfile} is a path at the other site; replay --hostfile names this site's",
            fields=("hostfile",),
        )
    if spec.containerised and not image_here:
        raise UsageError(image_refusal(spec, where), fields=("image",))


def shown(replay: Replay, accepted_env: tuple[str, ...] = ()) -> list[str]:
    """Every value a replayed run takes from the archive, one line each, each variable with
    its verdict, and each of the archive's fields refused or replaced here with the reason
    (replay --dry-run)."""
    foreign = replay.foreign or replay.spec
    lines = []
    for name in FROM_ARCHIVE:
        value = getattr(foreign, name)
        if name == "extra_env":
            lines += [f"from the archive: {verdict.line()}" for verdict in foreign_env.judge_all(value, accepted_env)]
        elif name in replay.changes:
            lines.append(replay.changes[name])
        elif value not in (None, ""):
            lines.append(f"from the archive: {name.replace('_', '-')} = {value}")
    return lines


def local_choice(
    foreign: RunSpec,
    where: str,
    image: str | None,
    runtime: str | None,
    runtime_from: str,
    fabric: str | None,
    hostfile: str | None,
) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """What this site puts in place of the archive's fields that name a file, an image or a
    runtime: (changes to the spec, a line for each such field, why the run cannot run here or None).
    A run on the host's software replays on the host; a run in an image needs this site's image
    (`image`) and runtime (`runtime`, said by `runtime_from`; else apptainer for an image file)."""
    changes: dict[str, Any] = {}
    lines: dict[str, str] = {}
    refused = None
    if foreign.hostfile and hostfile:
        changes["hostfile"] = hostfile
        lines["hostfile"] = (
            f"hostfile: the archive's {foreign.hostfile} is not used; this site's {hostfile} (--hostfile)"
        )
    elif foreign.hostfile:
        lines["hostfile"] = (
            f"from the archive: hostfile = {foreign.hostfile}: refused (a path at the other site; "
            "replay --hostfile names this site's)"
        )
    if fabric:
        changes["fabric"] = fabric
        lines["fabric"] = (
            f"fabric: the archive's {foreign.fabric or 'none'} replaced by this site's {fabric} (--fabric)"
        )
    if not foreign.containerised:
        if foreign.image:
            changes["image"] = None
            lines["image"] = f"image: the archive's {foreign.image!r} is not used (its run was on the host)"
        lines["runtime"] = "runtime: host (the original ran on its host's software; so does its replay)"
        return changes, lines, refused
    if runtime == HOST:
        changes.update(runtime=HOST, image=None)
        lines["image"] = f"image: the archive's {foreign.image!r} is not used; this run uses this host's software"
        lines["runtime"] = f"runtime: host ({runtime_from}); the archive's {foreign.runtime} is not used"
        return changes, lines, refused
    if not image:
        refused = image_refusal(foreign, where)
        lines["image"] = (
            f"image: the archive's {foreign.image!r} ({foreign.runtime}) is not used: refused (an image another "
            "site names is never run here; replay --image names this site's copy)"
        )
        lines["runtime"] = f"runtime: the archive's {foreign.runtime} is not used (this site's goes with --image)"
        return changes, lines, refused
    if not runtime:
        if not (image.endswith(".sif") or Path(image).exists()):
            raise UsageError(
                f"replay --image {image}: name its runtime with --runtime (or a site file's runtime); "
                "an image file is apptainer's by default, and the archive's runtime is never taken",
                fields=("runtime",),
            )
        runtime, runtime_from = "apptainer", "an image file"
    changes.update(image=image, runtime=runtime)
    lines["image"] = f"image: the archive's {foreign.image!r} is not used; this run uses {image!r} (--image)"
    same = " (the archive's too)" if runtime == foreign.runtime else f"; the archive's {foreign.runtime} is not used"
    lines["runtime"] = f"runtime: {runtime} ({runtime_from}){same}"
    return changes, lines, refused


# an emulated node's namespace (launch.fleet.emulate: fbemu-<cluster>-n<i>): a run's own cluster is
# named afresh for every run, so a replay's differs from its original's however alike the commands
EMULATED_NODE = re.compile(r"\bfbemu-[\w.-]+?-(n\d+)\b")


def argv_shape(argv: list[str], run_id: str | None) -> list[str]:
    """argv with what legitimately differs between sites abstracted: tool paths, the run directory
    and the emulated cluster's name."""
    shape = []
    for arg in argv:
        if run_id and run_id in arg:
            arg = "<run-dir>" + arg.split(run_id, 1)[1]
        elif arg.startswith("/") and "/" in arg[1:] and not arg.endswith((".sif", ".sqfs")):
            arg = "<path>/" + arg.rsplit("/", 1)[1]
        arg = EMULATED_NODE.sub(r"fbemu-<cluster>-\1", arg)
        shape.append(re.sub(r"^<path>/python3(\.\d+)?$", "<path>/python", arg))
    return shape


def check_image(result: dict, spec: RunSpec, allow_mismatch: bool) -> list[str]:
    """The local image of `spec` (this site's choice) against the digest the original recorded, the
    archive's only use: an image file that is not a regular file is refused before it is opened."""
    image = result.get("image")
    recorded = image.get("digest") if isinstance(image, dict) else None
    if not spec.image:
        return ["no image: the run uses this host's software, which no digest checks"]
    runtime = runtime_named(runtime_name("--runtime", spec.runtime))
    image = shapes.image("--image", spec.image)  # one argv element of the runtime's, never an option
    if runtime.image_is_file:
        try:
            regular_file(image, "image")
        except UntrustedInput as exc:
            raise UsageError(str(exc), fields=("image",)) from None
    current = runtime.digest(image)
    if recorded and current == recorded:
        return []
    problem = (
        f"image {spec.image}: digest {current or 'unknown (image absent?)'} differs from the "
        f"recorded {recorded if isinstance(recorded, str) else 'unknown'}"
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
    runtime: str | None = None,
    runtime_from: str = "--runtime",
) -> list[Replay]:
    """The runs to replay. `image`, `runtime`: this site's image and its runtime (a pulled one; an
    image file is apptainer's unless `runtime` says; `runtime_from` says who chose it), used in
    place of the archive's, whose digest only it must have; `fabric`: this site's fabric instead
    of the archive's (the same work on another network: what two sites compare); `hostfile`:
    this site's, for runs that named one; `refuse_now`: False only to show every variable's,
    path's and image's verdict before refusing (replay --dry-run calls `refuse_foreign` itself)."""
    results = archive.results()
    if not results:
        raise UsageError(f"archive {archive.path} holds no results")
    replays = []
    for _, result in sorted(results.items(), key=lambda item: item[1].run_id):
        foreign = spec_of(result)
        where = f"result {result.run_id}"
        changes, lines, refused = local_choice(foreign, where, image, runtime, runtime_from, fabric, hostfile)
        if refuse_now:
            refuse_foreign(foreign, accepted_env, where, hostfile_here=hostfile is not None, image_here=not refused)
        if refused:  # dry-run: shown, then refused
            replays.append(Replay(result, foreign, [], foreign, lines, refused))
            continue
        spec = dataclasses.replace(foreign, **changes).validated() if changes else foreign
        replays.append(Replay(result, spec, check_image(result, spec, allow_image_mismatch), foreign, lines))
    return replays


def command_of(replay: Replay, results_dir: Path, site: Site | None = None) -> tuple[list[str], str | None]:
    """The argv a replayed run would start, and its job script (sbatch): what replay --dry-run
    shows; nothing is written."""
    from launch.runs.run import prepare

    prepared = prepare(replay.spec, results_dir, site or Site.default())
    return prepared.command.argv, prepared.job_script


def run_all(
    archive: archives.Archive,
    replays: list[Replay],
    results_dir: Path,
    site: Site | None = None,
    timeout: float | None = None,
    echo: bool = True,
) -> list[dict]:
    from launch.runs.run import execute_run, prepare

    outputs: list[dict] = []  # the replays' results, as the archive's side carries them (raw: launch.provenance)
    archive_sha = sha256_file(archive.path)
    signed_by = archive.provenance().line()
    for replay in replays:
        if replay.refused:
            raise UsageError(replay.refused, fields=("image",))
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
