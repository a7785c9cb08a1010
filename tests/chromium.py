"""A real headless Chromium for the HTML report tests (Debian's `chromium`; `.ci/run` installs it),
behind the `browser` fixture of conftest.py.

`browser.check(html_path)` opens a copy of the page with a probe script added: one part, first
in `<head>`, records every script error, unhandled rejection and `console.error`; the other, at
the end of `<body>`, waits for the load event and writes a JSON verdict into the DOM (charts on
the page, charts with a drawn `.main-svg`, traces per chart, the errors). Chromium's
`--dump-dom` then hands the DOM back. Without Chromium the tests skip, except under CI, where
they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=15000")

_ERRORS_PROBE = """<script>
window.__probeErrors = [];
window.addEventListener("error", function (e) { window.__probeErrors.push("error: " + e.message); });
window.addEventListener("unhandledrejection", function (e) { window.__probeErrors.push("rejection: " + e.reason); });
(function () { var log = console.error; console.error = function () {
  window.__probeErrors.push("console.error: " + Array.prototype.join.call(arguments, " "));
  return log.apply(console, arguments); }; })();
</script>"""

_VERDICT_PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var charts = Array.prototype.slice.call(document.querySelectorAll(".plotly-graph-div"));
  var verdict = {
    charts: charts.length,
    rendered: charts.filter(function (c) { return c.querySelector(".main-svg") !== null; }).length,
    traces: charts.map(function (c) { return (c.data || []).length; }),
    drawn: charts.map(function (c) { return c.querySelectorAll(".scatterlayer .trace").length; }),
    titles: charts.map(function (c) { var t = c.querySelector(".gtitle"); return t ? t.textContent : ""; }),
    errors: window.__probeErrors,
    viewport: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    cut_off: Array.prototype.slice.call(document.querySelectorAll("table, .plotly-graph-div"))
      .filter(function (e) { return e.getBoundingClientRect().right > window.innerWidth + 1; })
      .map(function (e) { return e.tagName + ": " + (e.textContent || "").slice(0, 60); }),
    plotly: typeof Plotly !== "undefined" ? Plotly.version : null,
    external: Array.prototype.slice.call(document.querySelectorAll("script[src], link[href]"))
      .map(function (e) { return e.src || e.href; })
  };
  var out = document.createElement("pre");
  out.id = "probe-verdict";
  out.textContent = JSON.stringify(verdict);
  document.body.appendChild(out);
}, 200); });
</script>"""


@dataclass
class Browser:
    executable: str
    workdir: Path

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        profile = tempfile.mkdtemp(dir=self.workdir, prefix="profile-")
        return subprocess.run([self.executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def check(self, page: Path, width: int | None = None) -> dict:
        """Open `page` (in a window `width` CSS pixels wide, when given) and return the probe's
        verdict, which also lists the tables and charts that reach past the window's right edge."""
        text = page.read_text(encoding="utf-8")
        probed = self.workdir / f"probed-{page.name}"
        probed.write_text(text.replace("<head>", "<head>" + _ERRORS_PROBE, 1)
                          .replace("</body>", _VERDICT_PROBE + "</body>", 1), encoding="utf-8")
        size = (f"--window-size={width},1000",) if width else ()
        done = self._run(*size, "--dump-dom", probed.as_uri())
        match = re.search(r'<pre id="probe-verdict">(.*?)</pre>', done.stdout, re.S)
        assert match, f"no verdict in the DOM (chromium exit {done.returncode}): {done.stderr[-2000:]}"
        return json.loads(match.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))

    def screenshot(self, page: Path, png: Path, width: int = 1280, height: int = 1600) -> None:
        """A PNG of the top of `page` (`width` × `height` CSS pixels)."""
        done = self._run(f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri())
        assert png.is_file(), f"no screenshot (chromium exit {done.returncode}): {done.stderr[-2000:]}"


def open_browser(workdir: Path) -> Browser:
    """The installed Chromium, working in `workdir`; skips the test without one, except under CI,
    where it fails."""
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return Browser(executable, workdir)
