"""The first thing a comparison says: the same stack on both sides (digest and SBOM), or how
the stacks differ, SBOM against SBOM."""

from __future__ import annotations

from types import SimpleNamespace

from containers import sbom
from launch.provenance import stacks
from tests.containers.test_sbom import PROBE_OUTPUT

STACK_1, STACK_2 = "1" * 64, "2" * 64


def _sbom(probe: str, digest: str) -> bytes:
    return sbom.document(
        sbom.parse_probe(probe), image_digest=f"sha256:{digest}", flavour="cpu-debian", fabric="stack", base_digest=""
    ).encode()


def _archive(stack_digest: str, sbom_text: bytes | None) -> SimpleNamespace:
    run = {"image": {"path": "/x.sif", "digest": "9" * 64, "stack_digest": stack_digest}}
    members = {"stack/stack-sbom.cdx.json": sbom_text} if sbom_text else {}
    return SimpleNamespace(members=members, results=lambda: {"results/a/result.json": run})


def test_same_stack_says_the_fabric_is_the_difference():
    text = _sbom(PROBE_OUTPUT, STACK_1)
    lines = stacks.stack_lines(stacks.of_archive(_archive(STACK_1, text)), stacks.of_archive(_archive(STACK_1, text)))
    assert lines == [
        f"stacks identical: sha256:{STACK_1[:12]}… on both sides (SBOM: 3 stack components, "
        "2 Python packages): what differs is the fabric and the hosts"
    ]


def test_different_stacks_say_what_differs():
    a = stacks.of_archive(_archive(STACK_1, _sbom(PROBE_OUTPUT, STACK_1)))
    rebuilt = stacks.of_archive(_archive(STACK_2, _sbom(PROBE_OUTPUT, STACK_2)))
    assert stacks.stack_lines(a, rebuilt)[1:] == ["  same components, rebuilt (the image digests differ)"]
    newer = stacks.of_archive(_archive(STACK_2, _sbom(PROBE_OUTPUT.replace("ucx\t1.13.1-1", "ucx\t1.18.0-1"), STACK_2)))
    lines = stacks.stack_lines(a, newer)
    assert lines[0].startswith(f"stacks differ: A sha256:{STACK_1[:12]}… vs B sha256:{STACK_2[:12]}…")
    assert lines[1] == "  ucx 1.13.1 vs 1.18.0"
    unknown = stacks.stack_lines(a, stacks.of_archive(_archive(STACK_2, None)))
    assert unknown[1] == "  what differs is unknown: B: the archive carries no SBOM"


def test_a_hostile_sbom_is_refused_not_trusted():
    side = stacks.of_archive(_archive(STACK_1, b'{"bomFormat": "CycloneDX", "components": [1]}'))
    assert side.summary is None and "refused" in side.note


def test_report_names_one_stack_or_several():
    one = [
        {"image": {"digest": "9" * 64, "stack_digest": STACK_1}, "spec": {"fabric": fabric}}
        for fabric in ("emu-eth-1g", "emu-eth-5g")
    ]
    line = stacks.report_lines(one)[0]
    assert line.startswith(f"every run ran on one stack: sha256:{STACK_1[:12]}")
    assert line.endswith(": the fabric (emu-eth-1g, emu-eth-5g) is what differs")
    two = one + [{"image": {"digest": "8" * 64, "stack_digest": STACK_2}}]
    assert stacks.report_lines(two)[0] == "the runs used 2 stacks:"
    assert stacks.report_lines([{"image": None}]) == [
        "every run ran on the host (no image): no stack digest to compare"
    ]


def test_a_fabric_images_sbom_compares_with_its_stacks():
    """B may hold only the fabric image's SBOM (its base: the stack image); A's archive the stack's."""
    stack_sbom = sbom.document(
        sbom.parse_probe(PROBE_OUTPUT),
        image_digest=f"sha256:{STACK_1}",
        flavour="cpu-debian",
        fabric="stack",
        base_digest="sha256:" + "3" * 64,
    ).encode()
    fabric_sbom = sbom.document(
        sbom.parse_probe(PROBE_OUTPUT),
        image_digest="sha256:" + "9" * 64,
        flavour="cpu-debian",
        fabric="ethernet",
        base_digest=f"sha256:{STACK_1}",
        stack_digest=f"sha256:{STACK_1}",
    ).encode()
    lines = stacks.stack_lines(
        stacks.of_archive(_archive(STACK_1, stack_sbom)), stacks.of_archive(_archive(STACK_1, fabric_sbom))
    )
    assert lines == [
        f"stacks identical: sha256:{STACK_1[:12]}… on both sides (SBOM: 3 stack components, "
        "2 Python packages): what differs is the fabric and the hosts"
    ]
