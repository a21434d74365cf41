"""The record of a pulled archive: written, read back, and refused when it points outside its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.errors import UsageError
from launch.sharing.pulled import RECORD, Pulled, pulled_folder, pulled_in, read_record, write_record


def record_in(store: Path, hexdigest: str, when: float) -> Pulled:
    folder = (pulled_folder(store) / hexdigest).resolve()
    (folder / "results/run").mkdir(parents=True)
    pulled = Pulled(
        site="site-a",
        origin="host-a@c0ffee",
        signer="site-a@example.org",
        manifest_digest="sha256:" + "1" * 64,
        archive_digest="sha256:" + hexdigest,
        reference="127.0.0.1:5000/fabric-bench/results@sha256:" + "1" * 64,
        result_paths=(folder / "results/run/result.json",),
        archive_path=folder / "archive.tar.gz",
        system_path=None,
        stack_digests=("sha256:" + "5" * 64,),
        annotations={"org.fabric-bench.site": "site-a"},
        pulled_unix=when,
    )
    write_record(pulled, folder)
    return pulled


def test_records_read_back_oldest_first_and_unfinished_ones_are_left_out(tmp_path: Path) -> None:
    later = record_in(tmp_path, "b" * 64, 2.0)
    earlier = record_in(tmp_path, "a" * 64, 1.0)
    (pulled_folder(tmp_path) / ".incoming-x" / "0").mkdir(parents=True)  # an import under way
    assert pulled_in(tmp_path) == [earlier, later]
    assert json.loads((pulled_folder(tmp_path) / ("a" * 64) / RECORD).read_text())["result_paths"] == [
        "results/run/result.json"
    ]
    assert pulled_in(tmp_path / "empty") == []


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("result_paths", ["../../../etc/passwd"], "leaves its folder"),
        ("archive_path", "/etc/passwd", "is not a relative path"),
        ("archive_digest", "sha256:abc", "is not sha256:<64 hex>"),
        ("site", "site\x1b[2J", "is not one line of text"),
        ("record_version", 99, "not a pulled record of version 1"),
    ],
)
def test_a_record_that_is_not_one_is_refused(tmp_path: Path, field: str, value: object, words: str) -> None:
    record_in(tmp_path, "c" * 64, 1.0)
    path = pulled_folder(tmp_path) / ("c" * 64) / RECORD
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("(", r"\(")):
        read_record(path.parent)
