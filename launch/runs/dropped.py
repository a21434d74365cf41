"""What a sweep leaves out of its plan, and why; the sweep plans the rest, and its dry run and
summary.json list what it left out.

Two kinds of drop:
- combinations of the matrix that no engine can run (launch.plan.experiment's NOT_APPLICABLE
  rules, the same test `expand` applies), one entry per rule and the matrix values that decide it;
- points that preflight would refuse, decided by preflight's own function
  (launch.site.preflight.decide: TensorFlow on GPUs, MPI on GPU buffers without an image that
  says its MPI is CUDA-aware and, for Horovod, holds its MPI build) on the facts it reads at run
  time: the labels of the point's
  image, read from the image where it is here, else the labels `make image` gives the image of
  that name (`<fabric>-<flavour>.sif`, containers.recipe.labels). What only the hosts can say (their
  drivers, devices, libraries) is left to preflight at run time. A 1-rank baseline left serving
  no run is dropped with them.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from bench import catalog
from containers import stack
from containers.fabrics import PROFILES
from containers.recipe import labels as recipe_labels
from launch import shapes
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import RUNTIMES
from launch.plan.experiment import NOT_APPLICABLE, Experiment, Point, measures_alone, read_fields
from launch.site import preflight
from launch.site.config import Site

MATRIX, PREFLIGHT = "matrix", "preflight"


@dataclass(frozen=True)
class Dropped:
    reason: str
    count: int  # combinations of the matrix, or points (each repetition one)
    by: str  # MATRIX | PREFLIGHT
    what: str = ""  # MATRIX: the values that decide it, "engine=ddp allreduce=mpi"
    points: tuple[str, ...] = ()  # PREFLIGHT: the points' labels (repetitions left out)

    def lines(self) -> list[str]:
        plural = "s" if self.count != 1 else ""
        if self.by == MATRIX:
            return [f"dropped {self.count} combination{plural} {self.what}: {self.reason}"]
        return [f"dropped {self.count} point{plural}: {self.reason}", *(f"  {label}" for label in self.points)]


def image_labels(spec: RunSpec, cache: dict[str, dict[str, str]] | None = None) -> dict[str, str] | None:
    """The labels preflight would read from the spec's image: the image's own where it is a file
    here, else those `make image` gives an image of its name; {} where neither says; None for a run
    on the host (no image)."""
    if not spec.containerised or not spec.image:
        return None
    cache = {} if cache is None else cache
    if spec.image not in cache:
        runtime = RUNTIMES[spec.runtime]() if spec.runtime in RUNTIMES else None  # unknown: refused by name
        if runtime is None:
            cache[spec.image] = {}
        elif runtime.image_is_file and Path(spec.image).is_file():
            cache[spec.image] = runtime.labels(shapes.image("--image", spec.image))
        else:
            cache[spec.image] = labels_of_name(spec.image)
    return cache[spec.image]


def labels_of_name(image: str) -> dict[str, str]:
    """The labels of `images/<fabric>-<flavour>.sif` as containers.recipe writes them; {} for another name."""
    stem = Path(image).name.removesuffix(".sif")
    for flavour in sorted(stack.FLAVOURS, key=len, reverse=True):  # cpu-debian before cpu
        fabric = stem.removesuffix(f"-{flavour}")
        if fabric != stem and fabric in PROFILES:
            return recipe_labels(fabric, flavour, "planned")
    return {}


def matrix_drops(experiment: Experiment, site: Site, launcher: str | None = None) -> list[Dropped]:
    """The combinations `expand` leaves out (its NOT_APPLICABLE test), one entry per rule and the
    values of the rule's keys that the matrix varies."""
    base = {"runtime": site.runtime, **experiment.fixed}
    if launcher:
        base["launcher"] = launcher
    names = list(experiment.matrix)
    counts: dict[tuple[str, str], int] = {}
    for combo in itertools.product(*experiment.matrix.values()):
        fields = {**dataclasses.asdict(RunSpec()), **read_fields(experiment, {**base, **dict(zip(names, combo))})}
        if fields["framework"] not in catalog.ENGINES:
            continue  # refused by name when the spec is made
        for keys, why, broken in NOT_APPLICABLE:
            if not (any(k in experiment.matrix for k in keys) and broken(fields)):
                continue
            what = " ".join(f"{k}={fields[k]}" for k in keys if k in experiment.matrix)
            counts[(what, why)] = counts.get((what, why), 0) + 1
            break
    return [Dropped(why, n, MATRIX, what=what) for (what, why), n in counts.items()]


def preflight_drops(points: list[Point]) -> tuple[list[Point], list[Dropped]]:
    """The points preflight accepts, and those it would refuse (launch.site.preflight.decide on the
    labels of each point's image), one entry per point over its repetitions; a 1-rank baseline whose
    every run was dropped goes with them."""
    cache: dict[str, dict[str, str]] = {}
    refused = {p.key: why for p in points if (why := preflight.refusal(p.spec, image_labels(p.spec, cache)))}
    kept = [p for p in points if p.key not in refused]
    runs = [p for p in kept if not p.baseline]
    gone = [p for p in points if p.key in refused and not p.baseline]
    orphans = {
        b.key
        for b in kept
        if b.baseline
        and any(p.repetition == b.repetition and measures_alone(b.spec, p.spec) for p in gone)
        and not any(p.repetition == b.repetition and measures_alone(b.spec, p.spec) for p in runs)
    }
    why_of = {key: f"preflight would refuse: {why}" for key, why in refused.items()}
    why_of |= {key: "the 1-rank baseline of dropped runs only" for key in orphans}
    by_reason: dict[str, dict[str, int]] = {}
    for point in points:
        if point.key in why_of:
            label = dataclasses.replace(point, repetition=0).label.removesuffix("-r0")
            labels = by_reason.setdefault(why_of[point.key], {})
            labels[label] = labels.get(label, 0) + 1
    dropped = [Dropped(why, sum(labels.values()), PREFLIGHT, points=tuple(labels)) for why, labels in by_reason.items()]
    return [p for p in kept if p.key not in orphans], dropped


def summary_line(dropped: list[Dropped]) -> str:
    """One line after the entries: how many of each kind."""
    combos = sum(d.count for d in dropped if d.by == MATRIX)
    points = sum(d.count for d in dropped if d.by == PREFLIGHT)
    return (
        f"dropped {combos} combination{'s' if combos != 1 else ''} of the matrix no engine can run and "
        f"{points} point{'s' if points != 1 else ''} preflight would refuse"
    )
