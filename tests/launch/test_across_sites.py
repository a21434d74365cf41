"""One report across sites (launch.analysis.across_sites): side by side only what ran on one stack
and one benchmark version, and why not, in the data, on the page and in a real browser."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from launch.analysis import across_sites, report
from launch.results.result import read
from launch.sharing.pulled import Pulled, write_record
from tests.conftest import alive, fabric_bench, need
from tests.launch.test_report_browser import CHROMIUM, Browser
from tests.results import train_result

C1, C2 = "1" * 40, "2" * 40
OTHER_STACK = "sha256:" + "e" * 64
SPEC = {"nodes": 1, "ranks": 2, "batch_size": 8, "image_size": 32, "precision": "fp32", "gpus_per_node": 0}


def site_run(root: Path, site: str, number: int, samples: list[float], **how) -> Path:
    """A 2-rank training result of `site` (origin host), written where a run writes one."""
    commit, model, status, host = (
        how.pop(k, d) for k, d in (("commit", C1), ("model", "resnet18"), ("status", "ok"), ("host", site))
    )
    run_id = f"20261206T07{number:02d}00-train-{site}"
    recorded = {
        "transport": {"verdict": "match", "checks": [{"layer": "torch.backend", "observed": ["gloo"], "ok": True}]},
        "placement": {"verdict": "ok", "ranks": [{"rank": 0, "cpus": "0-1"}, {"rank": 1, "cpus": "0-1"}]},
        **how,
    }
    result = train_result(
        run_id,
        img=statistics.fmean(samples) if status == "ok" else None,
        samples=samples if status == "ok" else None,
        status=status,
        model=model,
        spec={**SPEC, "fabric": "ethernet"},
        origin={"host": host, "bundle_commit": commit},
        hosts=[site],
        versions={"torch": "2.14.1", "mpi": "Open MPI v4.1.4", "python": "3.11.7"},
        **recorded,
    )
    path = root / site / run_id / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(result))
    return path


def sites(root: Path) -> None:
    """site-a: 7 runs (a baseline); site-b: 2 slower runs and a failed one; site-c: another
    bundle commit; site-d: an image of another stack; site-a alone ran resnet50."""
    for n in range(7):
        site_run(root, "site-a", n, [100.0 + n, 102.0 + n, 101.0 + n])
    for n in range(2):
        site_run(root, "site-b", 10 + n, [60.0 + n, 61.0 + n, 62.0])
    site_run(root, "site-b", 12, [], status="failed")
    site_run(root, "site-c", 20, [90.0, 91.0, 92.0], commit=C2)
    site_run(
        root, "site-d", 30, [95.0, 96.0, 97.0], image={"digest": "sha256:" + "d" * 64, "stack_digest": OTHER_STACK}
    )
    site_run(root, "site-a", 40, [50.0, 51.0, 52.0], model="resnet50")


def test_only_one_stack_and_version_is_side_by_side_and_every_other_set_says_why(tmp_path: Path) -> None:
    sites(tmp_path)
    survey = across_sites.survey(report.load_results([tmp_path]))
    assert list(survey.sites) == ["site-a", "site-b", "site-c", "site-d"]
    (group,) = survey.groups
    data = group.as_dict()
    assert data["words"] == "train · resnet18 · ddp · 1 node x 2 ranks · batch_size 8 · image_size 32 · precision fp32"
    first, *others = data["sets"]
    assert [e["site"] for e in first["entries"]] == ["site-a", "site-b"]
    a, b = first["entries"]
    assert a["ratio"] is None and len(a["runs"]) == 7
    assert b["ratio"]["verdict"].endswith("% slower") and b["ratio"]["ratio"] == pytest.approx(61.0 / 104.0, rel=0.02)
    host_stack = a["stack"]
    assert host_stack.startswith("host:") and first["version"] == C1
    assert [(o["entries"][0]["site"], o["not_beside_first"]) for o in others] == [
        ("site-c", [f"benchmark version differs: {C1[:12]} at site-a, {C2[:12]} at site-c"]),
        ("site-d", [f"stack differs: {host_stack} at site-a, {OTHER_STACK[:19]}… at site-d"]),
    ]
    assert "95 % CI" in a["baseline"]["words"] and a["baseline"]["ci95"][0] < a["mean"] < a["baseline"]["ci95"][1]
    assert b["baseline"]["words"] == "none here (1 of 5 clean runs before the newest)"
    # one host, a CPU run: the network's fields do not apply; nothing says the processors
    assert a["description"]["missing"] == ["processors_memory"] and a["description"]["complete"]
    assert [g["words"].split(" · ")[1] for g in survey.as_dict()["one_site"]] == ["resnet50"]
    assert survey.without_figure == ["site-b: 20261206T071200-train-site-b (failed)"]


def test_a_result_that_records_no_bundle_commit_is_beside_nothing(tmp_path: Path) -> None:
    site_run(tmp_path, "site-a", 1, [100.0, 101.0, 102.0])
    site_run(tmp_path, "site-b", 2, [100.0, 101.0, 102.0], commit="unknown")
    site_run(tmp_path, "site-c", 3, [100.0, 101.0, 102.0], commit="unknown")
    (group,) = across_sites.survey(report.load_results([tmp_path])).groups
    reasons = [one["not_beside_first"] for one in group.as_dict()["sets"]]
    assert reasons == [
        [],
        ["benchmark version unknown at site-b (its results record no bundle commit)"],
        ["benchmark version unknown at site-c (its results record no bundle commit)"],
    ]


def pulled_record(root: Path, site: str, results: list[Path], system: dict | None) -> Pulled:
    archive = root / "pulled" / "archive.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"stands for the archive: only its path is linked")
    system_path = None
    if system is not None:
        system_path = root / "pulled" / "system.json"
        system_path.write_text(json.dumps(system))
    return Pulled(
        site=site,
        origin="builder@" + C1,
        signer=site,
        manifest_digest="sha256:" + "a" * 64,
        archive_digest="sha256:" + "b" * 64,
        reference=f"127.0.0.1:5000/fabric-bench/results@sha256:{'a' * 64}",
        result_paths=tuple(p.resolve() for p in results),
        archive_path=archive.resolve(),
        system_path=system_path,
    )


def test_a_pulled_archive_names_the_site_links_its_digest_and_its_system_description_counts(tmp_path: Path) -> None:
    ours = site_run(tmp_path / "here", "site-a", 1, [100.0, 101.0, 102.0])
    theirs = [site_run(tmp_path / "pulled", "builder", n, [80.0, 81.0, 82.0]) for n in (2, 3)]
    system = {"host_processor_model_name": "AMD EPYC 9654", "host_memory_capacity": "768 GiB"}
    record = pulled_record(tmp_path, "site-b", theirs, system)
    survey = across_sites.survey(report.load_results([tmp_path / "here", tmp_path / "pulled"]), [record])
    assert list(survey.sites) == ["site-a", "site-b"]
    assert survey.sites["site-b"]["signers"] == ["site-b"] and survey.sites["site-a"]["signers"] == []
    (group,) = survey.groups
    a, b = group.as_dict()["sets"][0]["entries"]
    assert b["links"] == [
        {
            "text": "archive sha256:bbbbbbbbbbbbbbbb…",
            "href": record.archive_path.as_uri(),
            "title": f"{record.reference}, signed by site-b",
        }
    ]
    assert a["links"] == [{"text": read(ours).run_id, "href": ours.resolve().as_uri(), "title": str(ours)}]
    assert b["description"]["score"] == pytest.approx(1.0)  # the system description says the processors
    assert a["description"]["words"] == "complete description (95%)"


def look(page: Path, profile: Path) -> dict:
    """What a reader of the page sees first, and the across-sites section's words, in Chromium."""
    browser = Browser(profile)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Page.enable", session=session)
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        expression = """(() => {
          const table = document.querySelector('table');
          const across = document.querySelector('#across-sites');
          const verdicts = document.querySelector('section.verdict');
          const box = table.getBoundingClientRect();
          return {firstHeading: document.querySelector('h2').innerText,
                  firstTableIn: table.closest('section.across-sites') ? 'across-sites' : 'elsewhere',
                  header: [...table.querySelectorAll('thead th')].map(th => th.innerText),
                  rows: [...table.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(c => c.innerText)),
                  tableShown: box.height > 0 && box.width > 0,
                  beforeVerdicts: !!(verdicts && (across.compareDocumentPosition(verdicts) & Node.DOCUMENT_POSITION_FOLLOWING)),
                  notCompared: [...document.querySelectorAll('p.not-compared')].map(p => p.innerText),
                  incomplete: [...document.querySelectorAll('td.incomplete')].map(td => td.innerText),
                  links: [...table.querySelectorAll('a')].map(a => a.href),
                  firstFigure: document.querySelector('figure') ? document.querySelector('figure').id : null};
        })()"""
        answer = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
        return answer["result"]["value"]
    finally:
        browser.close()
        assert alive([browser.proc.pid]) == set()


def test_the_page_opens_with_the_comparison_table_and_names_what_is_apart(tmp_path: Path) -> None:
    need(CHROMIUM is not None, "chromium not installed (Debian package `chromium`; scripts/setup.sh --test)")
    sites(tmp_path / "in")
    site_run(tmp_path / "in", "site-e", 50, [70.0, 71.0, 72.0], transport=None, placement=None)  # says less
    data = report.build([tmp_path / "in"], tmp_path / "out")
    assert data["across_sites"]["groups"] and "across_sites_0" in data["plots"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.index('id="across-sites"') < html.index('class="verdict"')
    seen = look(tmp_path / "out" / "report.html", tmp_path / "profile")
    assert seen["firstHeading"] == "Across sites: comparable results side by side"
    assert seen["firstTableIn"] == "across-sites" and seen["tableShown"] and seen["beforeVerdicts"]
    assert seen["header"][:3] == ["site", "fabric", "mean (img/s)"] and seen["header"][-1] == "results"
    assert [row[0] for row in seen["rows"]] == ["site-a", "site-b", "site-e"]
    assert seen["incomplete"] == [
        "incomplete description (70%): missing transport_evidence, placement, processors_memory"
    ]
    assert seen["notCompared"][0] == (
        f"Not compared with site-a: site-c: benchmark version differs: {C1[:12]} at site-a, {C2[:12]} at site-c"
    )
    assert seen["notCompared"][1].startswith("Not compared with site-a: site-d: stack differs: host:")
    assert all(link.startswith("file:///") and link.endswith("/result.json") for link in seen["links"])
    assert seen["firstFigure"] == "plot-across_sites_0"


def test_report_of_nothing_named_is_refused_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store" / "results.sqlite")}
    proc = fabric_bench("report", "--output", str(tmp_path / "out"), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fabric-bench: error: no results to report: name result directories, or --pulled for those pulled from "
        "other sites"
    ]
    assert not (tmp_path / "out").exists()


def test_report_prints_the_comparison_first(tmp_path: Path) -> None:
    site_run(tmp_path / "in", "site-a", 1, [100.0, 101.0, 102.0])
    site_run(tmp_path / "in", "site-b", 2, [90.0, 91.0, 92.0], commit=C2)
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store" / "results.sqlite")}
    proc = fabric_bench("report", str(tmp_path / "in"), "--output", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("across sites: train · resnet18 · ddp · 1 node x 2 ranks") and lines[0].endswith(
        "(site-a, site-b)"
    )
    assert lines[1] == (
        "  site-a ethernet: 101.0 img/s; site's baseline: none here (0 of 5 clean runs before the newest); "
        "complete description (95%)"
    )
    assert (
        lines[2]
        == f"  not compared with site-a: site-b: benchmark version differs: {C1[:12]} at site-a, {C2[:12]} at site-b"
    )


def test_a_side_whose_every_run_was_disturbed_is_named_never_compared(tmp_path: Path) -> None:
    busy = {"verdict": "disturbed", "causes": [{"signal": "cpu", "words": "other processes used 1.7 of a core"}]}
    site_run(tmp_path, "site-a", 1, [100.0, 101.0, 102.0])
    site_run(tmp_path, "site-a", 2, [40.0, 41.0, 42.0], disturbance=busy)
    site_run(tmp_path, "site-b", 3, [60.0, 61.0, 62.0], disturbance=busy)
    (group,) = across_sites.survey(report.load_results([tmp_path])).groups
    a, b = group.as_dict()["sets"][0]["entries"]
    assert a["runs"] == ["20261206T070100-train-site-a"] and a["mean"] == pytest.approx(101.0)
    assert a["left_out"] == [
        {"run_id": "20261206T070200-train-site-a", "causes": ["other processes used 1.7 of a core"]}
    ]
    assert b["disturbed"] and b["ratio"] == {"verdict": "cannot tell: every run was disturbed at site-b (1)"}
    header, rows = across_sites.table([a, b], "img/s")
    assert rows[0][header.index("runs")] == "1 (1 disturbed left out)"
    assert rows[1][header.index("runs")] == "1 (all disturbed)"
    assert rows[1][header.index("vs first row")] == "cannot tell: every run was disturbed at site-b (1)"


def test_a_hostile_site_name_is_text_on_the_page_and_in_the_terminal(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>\x1b[31mred"
    site_run(tmp_path / "in", "site-a", 1, [100.0, 101.0, 102.0])
    site_run(tmp_path / "in", "site-x", 2, [90.0, 91.0, 92.0], host=hostile)
    env = {**os.environ, "FABRIC_BENCH_STORE": str(tmp_path / "store" / "results.sqlite")}
    proc = fabric_bench("report", str(tmp_path / "in"), "--output", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "alert(1)" in proc.stdout.splitlines()[0]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_report_pulled_reads_the_stores_records_and_reports_each_result_once(tmp_path: Path) -> None:
    store_folder = tmp_path / "store"
    folder = store_folder / "pulled" / ("b" * 64)  # launch.sharing.pulled's layout
    theirs = [site_run(folder / "results", "builder", n, [80.0, 81.0, 82.0]) for n in (2, 3)]
    site_run(tmp_path / "here", "site-a", 1, [100.0, 101.0, 102.0])
    write_record(pulled_record(folder, "site-b", theirs, None), folder)
    env = {**os.environ, "FABRIC_BENCH_STORE": str(store_folder / "results.sqlite")}
    out = tmp_path / "out"
    proc = fabric_bench(
        "report", "--pulled", str(tmp_path / "here"), str(store_folder / "pulled"), "--output", str(out), env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("(site-a, site-b)")
    data = json.loads((out / "report_data.json").read_text())
    assert data["runs"] == 3  # the pulled folder named and --pulled: each pulled result once
    assert data["across_sites"]["sites"]["site-b"]["signers"] == ["site-b"]
