"""Which software stack runs ran on, and how two stacks differ: the first thing a comparison
between sites says, before any number.

A run's stack is the stack digest its image recorded (`image.stack_digest`; an image without
one: its own digest; no image: the host). Its bill of materials (containers/sbom.py) comes from
an archive's `stack/stack-sbom.cdx.json` (else `stack/sbom.cdx.json`), or, for results on this
host, from the SBOM beside the run's image or beside the recorded stack image of that digest.

    stack_lines(a, b)  ->  ["stacks identical: sha256:60678f7bd770… on both sides (SBOM: 8 stack
                            components, 92 Python packages): what differs is the fabric and the hosts"]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from containers import sbom as boms
from launch.provenance.images import normal
from launch.results.result import typed

HOST = "host (no image)"


@dataclass
class Stack:
    digests: set[str] = field(default_factory=set)
    summary: boms.Summary | None = None
    note: str = ""  # why no SBOM, when there is none

    @property
    def digest(self) -> str:
        return ", ".join(sorted(d[:19] + "…" if d.startswith("sha256:") else d for d in self.digests)) or HOST


def _run_digests(results: list) -> set[str]:
    found = set()
    for r in results:
        fields = typed(r) if isinstance(r, dict) else None
        image = fields.image if fields is not None else None
        if not isinstance(image, dict) or not (image.get("digest") or image.get("stack_digest")):
            found.add(HOST)
            continue
        found.add(normal(image.get("stack_digest") or image.get("digest")))
    return found


def _local_sbom(results: list, digest: str) -> boms.Summary | None:
    """The SBOM of the stack `digest` on this host: beside the recorded stack image, else beside a
    run's image (whose SBOM names the same stack digest)."""
    from containers.build import registry

    candidates = [Path(e["image"]) for e in registry() if normal(e.get("sha256")) == digest]
    candidates += [
        Path(str((f.image or {}).get("path") or ""))
        for f in (typed(r) for r in results if isinstance(r, dict))
        if f is not None
    ]
    for image in candidates:
        path = boms.path_for(str(image))
        if image.suffix == ".sif" and path.is_file():
            try:
                summary = boms.read(path.read_bytes())
            except boms.SbomError:
                continue
            if digest in (summary.image_digest, summary.stack_digest):
                return summary
    return None


def of_results(results: list) -> Stack:
    digests = _run_digests(results)
    stack = Stack(digests)
    if len(digests) == 1 and HOST not in digests:
        stack.summary = _local_sbom(results, next(iter(digests)))
        stack.note = "" if stack.summary else "no SBOM found on this host"
    return stack


def of_archive(archive) -> Stack:
    stack = Stack(_run_digests(list(archive.results().values())))
    for member in ("stack/stack-sbom.cdx.json", "stack/sbom.cdx.json"):
        if member in archive.members:
            try:
                stack.summary = boms.read(archive.members[member])
            except boms.SbomError as exc:
                stack.note = f"its SBOM is refused: {exc}"
            break
    else:
        stack.note = "the archive carries no SBOM"
    return stack


def _components(summary: boms.Summary | None) -> str:
    if summary is None:
        return ""
    return f" (SBOM: {len(summary.stack)} stack components, {len(summary.python)} Python packages)"


def _as_stack(summary: boms.Summary | None) -> boms.Summary | None:
    """A fabric image's SBOM compares with a stack's without its base (which is the stack image)."""
    if summary is None or not summary.stack_digest:
        return summary
    return dataclasses.replace(summary, base_digest="")


def stack_lines(a: Stack, b: Stack) -> list[str]:
    """What the two sides' stacks are, in words: identical (and so the fabric and hosts are what
    differs), or how they differ (SBOM against SBOM where both have one)."""
    a = dataclasses.replace(a, summary=_as_stack(a.summary))
    b = dataclasses.replace(b, summary=_as_stack(b.summary))
    if a.digests == b.digests and len(a.digests) == 1 and HOST not in a.digests:
        digest = next(iter(a.digests))
        line = f"stacks identical: {digest[:19]}… on both sides{_components(a.summary or b.summary)}"
        if (
            a.summary
            and b.summary
            and boms.diff(a.summary, b.summary)
            not in (["identical stack (same image digest)"], ["same components, rebuilt (the image digests differ)"])
        ):
            return [line, "but the two SBOMs disagree: " + "; ".join(boms.diff(a.summary, b.summary)[:5])]
        return [line + ": what differs is the fabric and the hosts"]
    lines = [f"stacks differ: A {a.digest} vs B {b.digest}"]
    if a.summary and b.summary:
        lines += ["  " + line for line in boms.diff(a.summary, b.summary)[:12]]
    else:
        lines.append(
            "  what differs is unknown: "
            + "; ".join(
                f"{side}: {stack.note or 'no SBOM'}" for side, stack in (("A", a), ("B", b)) if not stack.summary
            )
        )
    return lines


def of_path(path: Path, results: list) -> Stack:
    """A side of `compare`: an archive (its own SBOMs) or results on this host."""
    path = Path(path)
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        from launch.provenance import archive as archives

        return of_archive(archives.read(path))
    return of_results(results)


def report_lines(results: list) -> list[str]:
    """The report's opening: one stack for every run, or the stacks and how they differ."""
    if not results:  # a report of a locate run alone has no runs
        return []
    groups: dict[str, list] = {}
    for r in results:
        groups.setdefault(next(iter(_run_digests([r]))), []).append(r)
    if len(groups) == 1:
        digest, runs = next(iter(groups.items()))
        if digest == HOST:
            return ["every run ran on the host (no image): no stack digest to compare"]
        specs = [f.spec for f in (typed(r) for r in runs if isinstance(r, dict)) if f is not None and f.spec]
        fabrics = sorted({str(spec.fabric) for spec in specs if spec.fabric})
        differs = f": the fabric ({', '.join(fabrics)}) is what differs" if len(fabrics) > 1 else ""
        return [f"every run ran on one stack: {digest[:19]}…{_components(_local_sbom(runs, digest))}{differs}"]
    stacks = {d: of_results(runs) for d, runs in groups.items()}
    first, *others = list(stacks.values())
    lines = [f"the runs used {len(stacks)} stacks:"]
    for other in others:
        lines += ["  " + line for line in stack_lines(first, other)]
    return lines
