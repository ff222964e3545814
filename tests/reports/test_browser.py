"""The report in a real browser: headless Chromium opens a generated report file.

One test (CI time): Chromium is driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages ending in a NUL byte, read from fd 4 and written
to fd 3), which lets one browser process load the page, collect console errors and
exceptions, see every request, query the DOM and take a screenshot. `sample_run` comes
from conftest.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from executor.run import RunConfig
from executor.run_folder import write_failed_run
from launch.failures import LaunchError, RankFailure, died
from paraplan.commands.report import write_report
from reports.html import render_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1300,1000",
    "--remote-debugging-pipe",
)
PROBE = "paraplan-console-probe"
DOM_QUERY = """JSON.stringify({
  summary: !!document.querySelector('#summary .facts')
    && !!document.querySelector('#summary-table'),
  verdict: (document.querySelector('#summary .verdict b') || {}).textContent,
  predicted: document.querySelectorAll('figure[data-sides~="predicted"] svg rect').length,
  measured: document.querySelectorAll('figure[data-sides~="measured"] svg rect').length,
  figures: document.querySelectorAll('#timelines figure.gantt').length,
  errorRows: document.querySelectorAll('#phase-errors tbody tr').length,
  ganttWidth: document.querySelector('#timelines svg').getBoundingClientRect().width,
  pageHeight: document.documentElement.scrollHeight,
})"""


class DevTools:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, user_data_dir: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # bash puts our pipe ends on fds 3 and 4, where Chromium expects them (dash cannot
        # redirect from fds above 9, which is where they land under pytest).
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
                str(CHROMIUM),
                *FLAGS,
                f"--user-data-dir={user_data_dir}",
                "about:blank",
            ],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def call(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        reply = self.wait_for(lambda m: m.get("id") == self._next_id, timeout_s)
        assert "error" not in reply, f"{method} failed: {reply['error']}"
        return reply["result"]

    def wait_for(self, match: Any, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if match(message):
                    return message
            ready, _, _ = select.select([self._from_chrome], [], [], deadline - time.monotonic())
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the debugging pipe")
            self._buffer += chunk

    def close(self) -> None:
        with contextlib.suppress(TimeoutError, EOFError, OSError):
            self.call("Browser.close", timeout_s=5.0)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def console_problems(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, uncaught exceptions and error log entries, as text."""
    problems = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            problems.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif e["method"] == "Runtime.exceptionThrown":
            problems.append(p["exceptionDetails"].get("text", "exception"))
        elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            problems.append(p["entry"]["text"])
    return problems


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs /usr/bin/chromium (Debian: apt-get install -y chromium; .ci/run installs it)",
)
def test_report_renders_in_headless_chromium(tmp_path: Path, sample_run: Any) -> None:
    r = sample_run
    page = tmp_path / "report.html"
    page.write_text(
        render_report(
            r.bundle, r.estimate, r.predicted, r.measured, r.metrics, candidates=r.candidates
        )
    )
    with tempfile.TemporaryDirectory() as profile:
        browser = DevTools(profile)
        try:
            target = browser.call("Target.createTarget", url="about:blank")["targetId"]
            browser.session = browser.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            for domain in ("Runtime", "Log", "Page", "Network"):
                browser.call(f"{domain}.enable")
            browser.call("Page.navigate", url=page.as_uri())
            browser.wait_for(lambda m: m.get("method") == "Page.loadEventFired")
            dom = json.loads(
                browser.call("Runtime.evaluate", expression=DOM_QUERY, returnByValue=True)[
                    "result"
                ]["value"]
            )
            shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
            problems = console_problems(browser.events)
            # The probe proves console errors do reach us, so "no problems" means something.
            browser.call("Runtime.evaluate", expression=f"console.error({PROBE!r})")
            if PROBE not in console_problems(browser.events):  # may come after the reply
                browser.wait_for(lambda m: m.get("method") == "Runtime.consoleAPICalled")
            assert PROBE in console_problems(browser.events)
            requests = [
                e["params"]["request"]["url"]
                for e in browser.events
                if e["method"] == "Network.requestWillBeSent"
            ]
        finally:
            browser.close()
    assert problems == []
    assert requests == [page.as_uri()]  # nothing fetched besides the page itself
    assert dom["summary"] and dom["verdict"] == "within 15%"
    assert dom["figures"] == 2 and dom["predicted"] > 50 and dom["measured"] > 50
    assert dom["errorRows"] >= 5
    assert dom["ganttWidth"] > 800  # laid out at the page's width, not collapsed
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", shot[16:24])  # IHDR
    assert width == 1300 and height > 500 and len(shot) > 20_000


FAILED_QUERY = """JSON.stringify({
  first: document.querySelector('main section').id,
  cause: (document.querySelector('#run-failure .cause') || {}).textContent,
  context: document.querySelectorAll('#run-failure li').length,
  sub: document.querySelector('.sub').textContent,
  verdict: (document.querySelector('#summary .verdict b') || {}).textContent,
  charts: document.querySelectorAll('svg').length,
})"""


def _failed_run_folder(folder: Path, sample_run: Any, write_run: Any) -> Path:
    """The prediction files of the sample plus what `write_failed_run` leaves after rank 1
    was killed during step 3: step logs of steps 0-2 on both ranks, rank 0 one more."""
    write_run(folder, sample_run, measured=False)
    steps = folder / "steps"
    steps.mkdir()
    for rank, count in ((0, 4), (1, 3)):
        lines = [
            json.dumps({"step": s, "phase": "measured", "time_s": 0.1 + s / 100, "loss": 6 - s})
            for s in range(count)
        ]
        (steps / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")
    reset = RankFailure(
        rank=0,
        error_type="RuntimeError",
        message="Connection reset by peer",
        traceback="tb",
        time_s=1.0,
    )
    config = RunConfig(bundle=sample_run.bundle, out_dir=str(folder))
    write_failed_run(config, LaunchError((reset, died(1, -9, 2.0))), first_step=0)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs /usr/bin/chromium (Debian: apt-get install -y chromium; .ci/run installs it)",
)
def test_a_failed_run_renders_with_its_failure_stated(
    tmp_path: Path, sample_run: Any, write_run: Any
) -> None:
    folder = _failed_run_folder(tmp_path / "run", sample_run, write_run)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["steps"] == [0, 1, 2] and metrics["loss"] == [6, 5, 4]  # step 3: rank 0 only
    page, _ = write_report(folder)
    with tempfile.TemporaryDirectory() as profile:
        browser = DevTools(profile)
        try:
            target = browser.call("Target.createTarget", url="about:blank")["targetId"]
            browser.session = browser.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
            for domain in ("Runtime", "Log", "Page"):
                browser.call(f"{domain}.enable")
            browser.call("Page.navigate", url=page.as_uri())
            browser.wait_for(lambda m: m.get("method") == "Page.loadEventFired")
            dom = json.loads(
                browser.call("Runtime.evaluate", expression=FAILED_QUERY, returnByValue=True)[
                    "result"
                ]["value"]
            )
            problems = console_problems(browser.events)
        finally:
            browser.close()
    assert problems == []
    assert dom["first"] == "run-failure"
    assert dom["cause"].startswith("rank 1 killed by signal 9 (SIGKILL)")
    assert dom["context"] == 1 and dom["sub"].startswith("prediction · the run failed")
    assert dom["verdict"] == "run failed"
    assert dom["charts"] >= 3  # the timeline and the loss and iteration-time charts
