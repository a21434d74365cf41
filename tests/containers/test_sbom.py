"""The stack's SBOM: CycloneDX from an image's own software list (dpkg, pip, compiler) and the
pinned stack facts; read back with validation; compared ("same components, rebuilt" vs
"ucx 1.13.1 vs 1.18.0"). The slow test writes the SBOM of the real cpu-debian image."""

from __future__ import annotations

import json

import pytest

from containers import sbom

PROBE_OUTPUT = "\n".join(
    [
        "libucx0\t1.13.1-1\tucx\t1.13.1-1",
        "ucx-utils\t1.13.1-1\tucx\t1.13.1-1",
        "openmpi-bin\t4.1.4-3+b1\topenmpi\t4.1.4-3",
        "libfabric1\t1.17.0-3\tlibfabric\t1.17.0-3",
        "bash\t5.2.15-2+b2\t\t",
        "@@pip",
        json.dumps([{"name": "torch", "version": "2.14.1"}, {"name": "numpy", "version": "2.4.6"}]),
        "@@cc",
        "",
        "@@pycc",
        "GCC 12.2.0",
        "@@local",
        "bin",
        "lib",
    ]
)


def _doc(probe_text: str, digest: str = "sha256:" + "1" * 64) -> str:
    return sbom.document(
        sbom.parse_probe(probe_text),
        image_digest=digest,
        flavour="cpu-debian",
        fabric="stack",
        base_digest="sha256:" + "2" * 64,
    )


def test_document_names_the_stack_python_and_base():
    text = _doc(PROBE_OUTPUT)
    data = json.loads(text)
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.6"
    summary = sbom.read(text)
    assert summary.stack == {"ucx": "1.13.1", "openmpi": "4.1.4", "libfabric": "1.17.0"}
    assert summary.python == {"torch": "2.14.1", "numpy": "2.4.6"}
    assert summary.os == {"ucx-utils": "1.13.1-1", "bash": "5.2.15-2+b2"}
    assert summary.base_digest == "sha256:" + "2" * 64
    assert summary.compiler == "none in the image"
    purls = {c["name"]: c.get("purl") for c in data["components"]}
    assert purls["torch"] == "pkg:pypi/torch@2.14.1"
    assert purls["ucx"].startswith("pkg:deb/debian/libucx0@1.13.1-1")
    assert _doc(PROBE_OUTPUT) == text  # deterministic: no timestamp, serial from the digest


def test_source_built_components_carry_url_sha256_and_configure_flags():
    from containers import sources

    probe = PROBE_OUTPUT.replace("@@cc\n", "@@cc\ngcc (Debian 12.2.0-14) 12.2.0\n").replace(
        "@@local\nbin", "@@local\nucx\nopenmpi\nbin"
    )
    facts = sbom.parse_probe(probe)
    data = json.loads(
        sbom.document(facts, image_digest="sha256:" + "3" * 64, flavour="cpu", fabric="stack", base_digest="")
    )
    ucx = next(c for c in data["components"] if c.get("bom-ref") == "src:ucx")
    # the cpu flavour's UCX is bookworm's 1.13.1 (source "ucx-cpu"; cuda's "ucx" is 1.22.0)
    cpu_ucx = sources.source("ucx-cpu")
    assert cpu_ucx.rehearsal is not None
    assert ucx["version"] == cpu_ucx.version == "1.13.1"
    ref = ucx["externalReferences"][0]
    assert ref["url"] == cpu_ucx.site_url
    assert ref["hashes"][0]["content"] == cpu_ucx.rehearsal.sha256
    props = {p["name"]: p["value"] for p in ucx["properties"]}
    assert props["fabric-bench:configure-flags"].startswith("--prefix=/usr/local/ucx")
    assert props["fabric-bench:compiler"] == "gcc (Debian 12.2.0-14) 12.2.0"


def test_diff_tells_rebuilt_from_changed():
    a = sbom.read(_doc(PROBE_OUTPUT, "sha256:" + "1" * 64))
    rebuilt = sbom.read(_doc(PROBE_OUTPUT, "sha256:" + "4" * 64))
    assert sbom.diff(a, a) == ["identical stack (same image digest)"]
    assert sbom.diff(a, rebuilt) == ["same components, rebuilt (the image digests differ)"]
    newer = sbom.read(
        _doc(
            PROBE_OUTPUT.replace("ucx\t1.13.1-1", "ucx\t1.18.0-1").replace(
                '"numpy", "version": "2.4.6"', '"numpy", "version": "2.5.0"'
            ),
            "sha256:" + "5" * 64,
        )
    )
    assert sbom.diff(a, newer)[:2] == ["ucx 1.13.1 vs 1.18.0", "python numpy 2.4.6 vs 2.5.0"]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"bomFormat": "SPDX"}),
        json.dumps({"bomFormat": "CycloneDX", "components": [{"version": "1"}]}),
        "x" * (sbom.MAX_BYTES + 1),
    ],
)
def test_a_strangers_sbom_is_validated(text):
    with pytest.raises(sbom.SbomError):
        sbom.read(text)


@pytest.mark.slow
def test_the_cpu_debian_image_has_an_sbom(cpu_ethernet_image):
    path = sbom.ensure(cpu_ethernet_image.image)
    summary = sbom.read(path.read_bytes())
    assert summary.image_digest == "sha256:" + cpu_ethernet_image.sha256
    assert summary.stack_digest == "sha256:" + cpu_ethernet_image.stack_digest
    assert summary.stack["openmpi"] == "4.1.4" and summary.stack["ucx"] == "1.13.1"
    assert summary.python["torch"] == "2.14.1" and summary.python["mpi4py"] == "4.1.2"
