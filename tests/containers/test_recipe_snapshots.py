"""Every recipe render pinned: the Apptainer definition (and the cuda stack's devel stage) and the
Dockerfile of each image (the stack and every fabric) x flavour x base, by sha256. A change to
any image's content shows up here as a named diff, as the argv/env snapshots do for the launch
contract; recipe hashes name content (not the commit), so a refactor must leave these unchanged.
Regenerate deliberately with FABRIC_BENCH_UPDATE_SNAPSHOTS=1 and say why in the commit."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from containers import recipe, stack
from containers.fabrics import FABRICS

SNAPSHOTS = Path(__file__).parent / "snapshots" / "recipes.json"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def renders() -> dict[str, dict[str, str]]:
    out = {}
    for image in ("stack", *FABRICS):
        for flavour in stack.FLAVOURS:
            for base in recipe.BASES:
                made = recipe.render(image, flavour, base=base, commit="snapshot")
                out[f"{image} {flavour} {base}"] = {
                    "recipe_hash": made.recipe_hash,
                    "definition": sha256(made.definition),
                    "devel_definition": sha256(made.devel_definition),
                    "dockerfile": sha256(made.dockerfile),
                }
    return out


def test_every_recipe_render_matches_its_snapshot():
    rendered = renders()
    if os.environ.get("FABRIC_BENCH_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.write_text(json.dumps(rendered, indent=1, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOTS.read_text())
    assert sorted(rendered) == sorted(expected)
    changed = [
        f"{key}: {part}" for key in rendered for part in rendered[key] if rendered[key][part] != expected[key][part]
    ]
    assert changed == []


def test_the_snapshot_covers_every_image_flavour_and_base():
    expected = json.loads(SNAPSHOTS.read_text())
    assert len(expected) == (1 + len(FABRICS)) * len(stack.FLAVOURS) * len(recipe.BASES)
    # the cuda stack's Apptainer devel stage is its own image; a fabric image has none
    assert expected["stack cuda local"]["devel_definition"] != sha256("")
    assert expected["infiniband cuda local"]["devel_definition"] == sha256("")
