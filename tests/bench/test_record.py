import json

from bench.record import RECORD_SCHEMA_VERSION, read_records, record_path, write_record


def test_records_round_trip_in_rank_order(tmp_path):
    write_record(tmp_path, 1, "train", value=2)
    write_record(tmp_path, 0, "train", value=1)
    write_record(tmp_path, 0, "error", error="boom")
    records = read_records(tmp_path)
    assert [(r["rank"], r["kind"]) for r in records] == [(0, "train"), (0, "error"), (1, "train")]
    assert all(r["schema_version"] == RECORD_SCHEMA_VERSION and r["host"] and r["pid"] for r in records)
    assert records[0]["value"] == 1


def test_truncated_or_foreign_lines_are_skipped(tmp_path):
    write_record(tmp_path, 0, "train", value=1)
    with open(record_path(tmp_path, 0), "a") as out:
        out.write(json.dumps({"schema_version": 99, "kind": "train", "rank": 0}) + "\n")
        out.write('{"schema_version": 1, "kind": "tr')  # rank killed mid-write
    records = read_records(tmp_path)
    assert len(records) == 1 and records[0]["value"] == 1


def test_an_escaping_exception_leaves_an_error_record_and_still_raises(tmp_path):
    import pytest

    from bench.record import errors_recorded

    with pytest.raises(RuntimeError, match="gloo died"):
        with errors_recorded(tmp_path, lambda: 3):
            raise RuntimeError("gloo died")
    (record,) = read_records(tmp_path)
    assert record["rank"] == 3 and record["kind"] == "error"
    assert record["error"] == "RuntimeError: gloo died" and "Traceback" in record["traceback"]
