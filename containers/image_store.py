"""The images this machine has built: one record each (digest, inputs, seconds per stage, log)
in CACHE/images/registry.json; an older apptainer image of the same (fabric, flavour) is deleted
when its successor is recorded (each is several GB)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from containers.files import write_json_atomic
from containers.host import cache_dir


@dataclass(frozen=True)
class ImageRecord:
    fabric: str
    flavour: str
    runtime: str
    image: str  # .sif path (apptainer) or image name (podman)
    sha256: str
    size_bytes: int
    input_key: str
    recipe_hash: str
    bundle_commit: str
    built_at: str
    build_seconds: float
    log: str
    base: str = "site"
    omitted: list = field(default_factory=list)  # components a rehearsal could not fetch
    stages: dict = field(default_factory=dict)  # seconds per build stage
    stack_digest: str = ""  # sha256 of the stack image it was built FROM
    stack_image: str = ""
    stack_stages: dict = field(default_factory=dict)
    devel_image: str = ""  # cuda stack: its devel stage's image


def registry_path() -> Path:
    return cache_dir() / "images" / "registry.json"


def registry() -> list[dict]:
    path = registry_path()
    return json.loads(path.read_text()) if path.exists() else []


def recorded_digests() -> set[str]:
    """The sha256 of every image recorded here, as sha256:HEX (a SIF's file digest, podman's image
    id): what an image a travelling file names must be known by to run here (launch.runs.images).
    An unreadable registry records none."""
    try:
        entries = registry()
    except (OSError, ValueError):
        return set()
    found = set()
    for entry in entries if isinstance(entries, list) else []:
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if isinstance(digest, str) and digest.strip():
            digest = digest.strip()
            found.add(digest if digest.startswith("sha256:") else f"sha256:{digest}")
    return found


def record(entry: ImageRecord) -> None:
    """Record entry; older apptainer images of the same (fabric, flavour) are
    deleted (each is several GB) and leave the registry with their files."""
    entries = []
    for old in registry():
        if old["image"] == entry.image:
            continue
        if (old["fabric"], old["flavour"], old["runtime"]) == (
            entry.fabric,
            entry.flavour,
            "apptainer",
        ) and entry.runtime == "apptainer":
            Path(old["image"]).unlink(missing_ok=True)
            if old.get("devel_image"):
                Path(old["devel_image"]).unlink(missing_ok=True)
            continue
        entries.append(old)
    entries.append(asdict(entry))
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, entries)


def find(fabric: str, flavour: str, runtime: str = "apptainer") -> Optional[dict]:
    """The newest recorded image of (fabric, flavour, runtime) that still exists."""
    for entry in reversed(registry()):
        if (entry["fabric"], entry["flavour"], entry["runtime"]) == (fabric, flavour, runtime) and (
            runtime != "apptainer" or Path(entry["image"]).exists()
        ):
            return entry
    return None
