"""Headless Chromium (Debian's `chromium`) for status-page tests: a screenshot, and the layout facts
a person would check by eye (cells wrapping onto a second line, anything wider than the window)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
REFRESH = re.compile(r'<meta http-equiv="refresh" content="\d+">')

# Appended to a copy of the page (the pages themselves have no scripts); runs after layout.
_MEASURE = """
<script>
window.addEventListener('load', () => {
  const wrapped = [...document.querySelectorAll('td')].filter(c => {  // headers break on purpose (<br>)
    const st = getComputedStyle(c);
    const lh = parseFloat(st.lineHeight) || 18;
    return c.clientHeight - parseFloat(st.paddingTop) - parseFloat(st.paddingBottom) > lh * 1.5;
  }).map(c => c.textContent.trim().slice(0, 40));
  const right = Math.max(...[...document.querySelectorAll('table, p, h1, h2')].map(e => e.getBoundingClientRect().right));
  document.body.insertAdjacentHTML('beforeend', '<pre id="measured">' +
    JSON.stringify({wrapped, right, scrollWidth: document.documentElement.scrollWidth}) + '</pre>');
});
</script>
"""


@dataclass(frozen=True, slots=True)
class Layout:
    wrapped: list[str]  # text of the cells laid out on more than one line
    right: float  # right edge of the widest block, px
    scroll_width: int


def _chromium(args: list[str], width: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},1000", "--virtual-time-budget=1500", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


def screenshot(page: str, png: Path, *, width: int, workdir: Path) -> None:
    src = workdir / "page.html"
    src.write_text(REFRESH.sub("", page))
    _chromium([f"--screenshot={png}", src.as_uri()], width, workdir)


def measure(page: str, *, width: int, workdir: Path) -> Layout:
    src = workdir / "measure.html"
    src.write_text(REFRESH.sub("", page).replace("</body>", _MEASURE + "</body>"))
    dom = _chromium(["--dump-dom", src.as_uri()], width, workdir)
    found = re.findall(r'<pre id="measured">(\{.*?\})</pre>', dom.stdout)  # the output, not the script
    assert found, dom.stderr[-2000:]
    doc = json.loads(html.unescape(found[-1]))
    return Layout(doc["wrapped"], float(doc["right"]), int(doc["scrollWidth"]))
