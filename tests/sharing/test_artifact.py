"""The results artifact's manifest, read as foreign input: ours round-trips, anything else is
refused in one line."""

from __future__ import annotations

import json

import pytest

from launch.errors import UsageError
from launch.sharing import annotations as notes
from launch.sharing import artifact

ARCHIVE = artifact.Blob(artifact.ARCHIVE_TYPE, "sha256:" + "a" * 64, 1234, artifact.ARCHIVE_TITLE)
SYSTEM = artifact.Blob(artifact.SYSTEM_TYPE, "sha256:" + "b" * 64, 56, artifact.SYSTEM_TITLE)
SAID = {notes.SITE: "site-a", notes.FABRIC: "ethernet,infiniband", notes.CREATED: "2026-12-06T07:00:00Z"}


def ours() -> dict:
    return json.loads(artifact.manifest(ARCHIVE, SYSTEM, SAID))


def test_our_manifest_follows_the_oras_artifact_convention_and_reads_back() -> None:
    body = ours()
    assert body["artifactType"] == "application/vnd.fabric-bench.results.v1+tar"
    assert body["config"] == {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "size": 2,
        "digest": artifact.EMPTY.digest,
    }
    assert artifact.EMPTY.digest == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    read = artifact.layout(artifact.manifest(ARCHIVE, SYSTEM, SAID), "here")
    assert (read.archive, read.system, read.annotations) == (ARCHIVE, SYSTEM, SAID)


def changed(**fields: object) -> bytes:
    return json.dumps({**ours(), **fields}).encode()


@pytest.mark.parametrize(
    "data, words",
    [
        (b"{not json", "is not JSON"),
        (b"[" * 100 + b"]" * 100, "nested more than 8 levels"),
        (changed(artifactType="application/vnd.other+tar"), "is not application/vnd.fabric-bench.results.v1+tar"),
        (changed(config=ARCHIVE.descriptor()), "the config is not the empty descriptor"),
        (changed(layers=[ARCHIVE.descriptor()] * 4), "layers are not one archive, at most one system description"),
        (changed(layers=[ARCHIVE.descriptor()] * 3), "layers are not [application/vnd.fabric-bench.results.archive"),
        (changed(layers=[SYSTEM.descriptor()]), "layers are not ["),
        (changed(layers=[{**ARCHIVE.descriptor(), "size": True}]), "size True is not a number of bytes"),
        (changed(layers=[{**ARCHIVE.descriptor(), "size": -1}]), "size -1 is not a number of bytes"),
        (changed(layers=[{**ARCHIVE.descriptor(), "digest": "sha256:../../x"}]), "a digest not of the form"),
        (changed(subject={"digest": "sha256:" + "c" * 64}), "fields this layout lacks (subject)"),
        (changed(annotations={**SAID, "org.fabric-bench.command": "rm -rf /"}), "is not one this bundle writes"),
        (changed(annotations={**SAID, notes.CREATED: "yesterday"}), "is not a UTC date"),
        (changed(annotations={**SAID, notes.MODEL: "resnet 50"}), "holds something other than tokens"),
        (changed(annotations={**SAID, "x": "a\nb"}), "holds a control character"),
        (changed(annotations={k: "v" for k in map(str, range(65))}), "at most 64 keys"),
        (changed(annotations={notes.FABRIC: "ethernet"}), "no org.fabric-bench.site annotation"),
    ],
)
def test_a_manifest_that_is_not_ours_is_refused_in_one_line(data: bytes, words: str) -> None:
    with pytest.raises(UsageError) as refused:
        artifact.layout(data, "reg/repo@sha256:x")
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).startswith("reg/repo@sha256:x") and str(refused.value).endswith("refused")


def test_filters_match_one_token_of_a_set() -> None:
    assert notes.matches(SAID, {"fabric": "infiniband", "site": "site-a", "model": None})
    assert not notes.matches(SAID, {"fabric": "infini"})
    assert not notes.matches(SAID, {"kind": "train"})  # an annotation the artifact lacks matches nothing
