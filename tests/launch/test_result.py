"""One reader of result.json: the same checks and the same words for every caller."""

import json

import pytest

from launch.kinds import sizes
from launch.provenance.archive import _results
from launch.analysis import compare, report
from launch.results import result, store
from launch import schema
from launch.results.result import ResultError


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


GOOD = {
    "schema_version": 1,
    "run_id": "r1",
    "status": "ok",
    "benchmark": "train",
    "world_size": 2,
    "spec": {"fabric": "ethernet"},
    "throughput": {"total_img_per_s": 80.0},
}


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema_version": 7, "run_id": "x"}', "unknown schema_version 7"),
        ('{"schema_version": 1}', "no run_id"),
    ],
)
def test_every_reader_reports_a_bad_file_with_the_same_line(tmp_path, capsys, text, why):
    write(tmp_path / "good" / "result.json", GOOD)
    bad = write(tmp_path / "bad" / "result.json", text)
    with pytest.raises(ResultError) as caught:
        result.read(bad)
    line = str(caught.value)
    assert line.startswith(f"{bad}: not a result: {why}")
    assert result.read_tree([tmp_path]) == ([result.migrate(GOOD)], [line])
    with pytest.raises(compare.UsageError) as refused:
        compare.load(tmp_path)
    assert str(refused.value) == line
    assert [r.run_id for r in report.load_results([tmp_path])] == ["r1"]
    assert line in capsys.readouterr().err
    count, problems = store.index_tree(tmp_path, store.connect(tmp_path / "store.sqlite"))
    assert (count, problems) == (1, [line])
    members = {"results/good/result.json": json.dumps(GOOD).encode(), "results/bad/result.json": text.encode()}
    assert list(_results(members)) == ["results/good/result.json"]
    assert line.replace(str(bad), "results/bad/result.json") in capsys.readouterr().err


def test_typed_views_and_derived_figures():
    r = result.parse(json.dumps(GOOD), "x")
    assert (r.run_id, r.ok, r.world_size, r.fabric, r.figure) == ("r1", True, 2, "ethernet", 80.0)
    # the JSON object it was, as the current schema holds it (GOOD is a version-1 result)
    assert r == {
        **GOOD,
        "schema_version": schema.SCHEMA_VERSION,
        "migrated_from": 1,
        "numerics": None,
        "origin": None,
        "disturbance": {"verdict": "not recorded", "causes": []},
    }
    assert json.loads(json.dumps(r)) == r
    assert result.scaling_efficiency(80.0, 2, 50.0, 1) == pytest.approx(0.8)
    # busbw from the row's own times (the size sweeps': launch.kinds.sizes): 1 MiB in 800 us on 2
    # ranks (allreduce's factor 1), spread ±5 %
    row = {"bytes": 2**20, "busbw_gbit_s": 2**20 * 8 / 800e-6 / 1e9, "samples_us": [760.0, 800.0, 840.0]}
    busbw, ci = sizes.busbw_of(sizes.SizeRow(**row), 1.0) or (None, None)
    assert busbw == pytest.approx(row["busbw_gbit_s"]) and ci == pytest.approx(
        busbw * 4.303 * 40 / 3**0.5 / 800, rel=1e-3
    )
    assert sizes.busbw_of(sizes.SizeRow(**{**row, "samples_us": ["x"]}), 1.0) is None
    assert sizes.busbw_of(sizes.SizeRow(**row), None) is None  # no factor: no busbw
    assert result.disagreements({**GOOD, "benchmark": "allreduce", "sizes": [row]}) == []
    assert (
        "is not what its times give"
        in result.disagreements({**GOOD, "benchmark": "allreduce", "sizes": [{**row, "busbw_gbit_s": 99.0}]})[0]
    )


def test_compare_allows_for_the_bus_bandwidth_noise():
    rows = [{"bytes": 1024, "busbw_gbit_s": 10.0, "samples_us": [0.78, 0.82, 0.8, 0.79, 0.81]}]
    values = compare.values(result.parse(json.dumps({**GOOD, "benchmark": "allreduce", "sizes": rows}), "x"))
    found = values["busbw_gbit_s@1024"]
    assert found.value == pytest.approx(1024 * 8 / 0.8e-6 / 1e9) and found.ci95 is not None and found.ci95 > 0
    assert (found.unit, found.higher_is_better, found.tolerance) == ("Gbit/s", True, 0.10)  # the kind's


def test_the_published_json_schema_is_the_declared_one():
    """docs/reference/result.schema.json is generated from launch.schema: other tools
    validate results with it, so it must not drift from what the bundle checks."""
    from launch import schema
    from tests.conftest import REPO

    published = json.loads((REPO / "docs/reference/result.schema.json").read_text())
    assert published == schema.json_schema(), "regenerate: python -m launch.schema > docs/reference/result.schema.json"
    assert published["properties"]["schema_version"]["const"] == schema.SCHEMA_VERSION


def test_a_version_2_result_reads_as_not_recorded_and_a_bad_verdict_is_refused():
    from launch import schema

    old = result.parse(json.dumps({**GOOD, "schema_version": 2}), "old")
    assert old["schema_version"] == schema.SCHEMA_VERSION and old["migrated_from"] == 2
    assert old["disturbance"] == {"verdict": "not recorded", "causes": []} and schema.problem(old) is None
    assert (
        schema.problem({**old, "disturbance": {"verdict": "fine"}})
        == "disturbance.verdict is not one of clean, disturbed, too short to judge, not recorded ('fine')"
    )
    assert (
        schema.problem({**old, "disturbance": {"verdict": "disturbed", "causes": "cpu"}})
        == "disturbance.causes is not a list of causes ('cpu')"
    )


def test_a_version_1_result_reads_as_the_current_version_and_a_written_one_validates(tmp_path):
    from launch import schema
    from launch.results.assemble import assemble

    old = result.parse(json.dumps(GOOD), "old")
    assert old["schema_version"] == schema.SCHEMA_VERSION and old["migrated_from"] == 1
    assert schema.problem(old) is None and old.figure == 80.0
    # rank records as bench.allreduce writes them (the fields launch.kinds.sizes reads)
    records = [
        {
            "schema_version": 1,
            "kind": "allreduce",
            "rank": r,
            "host": "h",
            "time_unix": 0,
            "backend": "gloo",
            "correct": True,
            "p2p": None,
            "sizes": [
                {
                    "bytes": 1024,
                    "time_us": 10.0,
                    "busbw_gbit_s": 0.8,
                    "algbw_gbit_s": 0.8,
                    "samples_us": [9.0, 10.0, 11.0],
                }
            ],
        }
        for r in (0, 1)
    ]
    spec = {"benchmark": "allreduce", "framework": "torch", "engine": "ddp", "model": "none", "ranks": 2}
    written = assemble(
        run_id="r2", spec=spec, argv=["x"], env={}, records=records, exit_code=0, log_tail=[], seconds=1.0
    )
    assert written["schema_version"] == schema.SCHEMA_VERSION and schema.problem(written) is None
    assert schema.problem({**written, "world_size": True}) == "world_size is not a positive integer (True)"
    # a kind's own fields are its kind's model's (launch.kinds): the shared schema leaves them to it
    assert schema.problem({**written, "sizes": [{"bytes": "1k"}]}) is None
    assert result.malformed({**written, "sizes": [{"bytes": "1k"}]}) == "sizes.0.bytes is not a finite number ('1k')"
