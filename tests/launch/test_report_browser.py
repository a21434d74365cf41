"""report.html as a reader sees it: opened in a real headless browser (Debian's `chromium`),
offline, driven over the DevTools protocol on a pipe (stdlib only)."""

import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path


from launch.analysis import report
from tests.conftest import need
from tests.launch.test_verdict import emulated_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-headless-shell")

READER = r"""
(async () => {
  const imgs = [...document.images];
  await Promise.all(imgs.map(i => i.decode().catch(() => null)));
  const width = document.documentElement.clientWidth;
  const seen = imgs.map(i => {
    const r = i.getBoundingClientRect();
    return {id: i.closest('figure') ? i.closest('figure').id : null, complete: i.complete,
            naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight, shownWidth: r.width,
            shownHeight: r.height, left: r.left, right: r.right};
  });
  const table = document.querySelector('#verdict-fabric table');
  const rows = table ? [...table.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(c => c.innerText)) : [];
  const header = table ? [...table.querySelectorAll('thead th')].map(th => th.innerText) : [];
  const verdictBox = table ? table.getBoundingClientRect() : null;
  const answer = document.querySelector('#verdict-fabric p.answer');
  const firstHeading = document.querySelector('h2');
  return {width, images: seen, header, rows, answer: answer ? answer.innerText : null,
          tableRight: verdictBox ? verdictBox.right : null, tableVisible: verdictBox ? verdictBox.height > 0 : false,
          firstSection: firstHeading ? firstHeading.innerText : null,
          plotsBelowVerdict: !!(answer && document.querySelector('figure') &&
             (answer.compareDocumentPosition(document.querySelector('figure')) & Node.DOCUMENT_POSITION_FOLLOWING))};
})()
"""


class Browser:
    """Chromium with --remote-debugging-pipe: JSON messages, NUL-terminated, on fds 3 (in) and 4 (out)."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 1000):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        argv = [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--proxy-server=http://127.0.0.1:9",  # offline
            "about:blank",
        ]

        def fds():  # out of the way first: a pipe may itself be fd 3 or 4 (and dup2 onto itself keeps CLOEXEC)
            ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w)]
            for target, fd in zip((3, 4), ends):
                os.dup2(fd, target)
                os.close(fd)

        self.log = open(profile.parent / "chromium.log", "wb")
        # close_fds would close 3 and 4 after preexec_fn made them: keep the parent's fds instead
        self.proc = subprocess.Popen(argv, preexec_fn=fds, stdout=self.log, stderr=subprocess.STDOUT, close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer, self.next_id, self.events = b"", 0, []

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def close(self):
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_browser, self.from_browser):
            os.close(fd)
        self.log.close()


def look_at(page: Path, profile: Path, screenshot: Path | None = None) -> dict:
    """What a reader of `page` sees, and every URL the page asked for."""
    profile.mkdir(parents=True, exist_ok=True)
    browser = Browser(profile)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Page.enable", session=session)
        browser.send("Network.enable", session=session)
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired")
        seen = browser.send(
            "Runtime.evaluate", {"expression": READER, "awaitPromise": True, "returnByValue": True}, session=session
        )["result"]["value"]
        if screenshot is not None:
            import base64

            shot = browser.send(
                "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session
            )
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        seen["requested"] = [
            e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"
        ]
        seen["failed"] = [
            e["params"].get("errorText") for e in browser.events if e.get("method") == "Network.loadingFailed"
        ]
        return seen
    finally:
        browser.close()


def check_what_a_reader_sees(seen: dict, plots: dict) -> None:
    assert seen["firstSection"] == "Does the fabric change performance?"
    assert seen["tableVisible"] and seen["rows"], "the verdict table is shown"
    assert seen["tableRight"] <= seen["width"] + 1, "the verdict table is not cut off"
    assert "verdict" in seen["header"] and "95% CI" in seen["header"]
    assert seen["answer"] and seen["answer"].startswith("In the ")
    assert seen["plotsBelowVerdict"]
    for name, plot in plots.items():
        assert plot["cut_off_text"] == [], f"{name}: text past the figure's edge"
    shown = {image["id"]: image for image in seen["images"]}
    assert set(shown) == {f"plot-{name}" for name in plots}, "every plot is on the page"
    for name in ("throughput", "scaling_efficiency", "verdict_ratios"):  # the plots first wanted
        assert f"plot-{name}" in shown
    for image in seen["images"]:
        assert image["complete"] and image["naturalWidth"] > 300 and image["naturalHeight"] > 200, image
        assert image["left"] >= 0 and image["right"] <= seen["width"] + 1, f"cut off: {image}"
        assert (
            abs(image["shownWidth"] / image["shownHeight"] - image["naturalWidth"] / image["naturalHeight"]) < 0.02
        ), f"distorted: {image}"
    assert all(url.startswith(("file:", "data:", "about:")) for url in seen["requested"]), seen["requested"]
    assert not seen["failed"], "nothing failed to load offline"


def test_report_page_as_a_reader_sees_it(tmp_path):
    need(CHROMIUM is not None, "chromium not installed (Debian package `chromium`; scripts/setup.sh --test)")
    for r in emulated_sweep():
        (tmp_path / "in" / r["run_id"]).mkdir(parents=True)
        (tmp_path / "in" / r["run_id"] / "result.json").write_text(json.dumps(r))
    data = report.build([tmp_path / "in"], tmp_path / "out")
    seen = look_at(tmp_path / "out" / "report.html", tmp_path / "profile", tmp_path / "out" / "page.png")
    check_what_a_reader_sees(seen, data["plots"])
    rows = {row[seen["header"].index("engine/backend")]: row for row in seen["rows"]}
    verdicts = {r["engine"]: r for r in data["verdicts"]["fabric"]["rows"]}
    for engine, row in rows.items():  # the page shows the numbers report_data.json holds
        assert row[seen["header"].index("verdict")] == verdicts[engine]["verdict"]
        assert row[seen["header"].index("ratio")] == f"{verdicts[engine]['ratio']:.3f}"
    if os.environ.get("FABRIC_BENCH_KEEP_SCREENSHOT"):
        shutil.copy(tmp_path / "out" / "page.png", os.environ["FABRIC_BENCH_KEEP_SCREENSHOT"])
