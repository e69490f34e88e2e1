"""The report page in a real browser: headless Chromium lays it out and screenshots it, and the screenshot has
the figures, diagrams and tables where the page put them (ink on the white page), and nothing where it put none.

``.ci/run`` installs Debian's ``chromium`` where ``apt-get`` may be used; without a browser the test is skipped
and says so.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from sim.cli.app import app
from tests.conftest import ROOT

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on this machine (`apt-get install chromium`; "
                                                         ".ci/run installs it where apt-get may be used)")
WIDTH = 1280
"""Browser window width (CSS px; the device scale factor is 1, so screenshot pixels are CSS px)."""
PROBE = """<script>
window.addEventListener("load", () => {
  const boxes = [...document.querySelectorAll("figure img, table")].map(e => {
    const r = e.getBoundingClientRect();
    return {kind: e.tagName.toLowerCase(), id: e.closest("[id]").id, x: r.left + scrollX, y: r.top + scrollY,
            w: r.width, h: r.height};
  });
  const headers = [...document.querySelectorAll("th")].map(e => {
    const r = e.getBoundingClientRect();
    return {text: e.textContent, id: e.closest("[id]").id, left: r.left + scrollX, right: r.right + scrollX};
  });
  document.body.dataset.boxes = JSON.stringify({height: document.documentElement.scrollHeight, boxes, headers});
});
</script>
"""
"""Appended to a copy of the page (the page itself has no script): where the browser laid out each image and
table, read back from the DOM Chromium dumps."""


def _chromium(*args: str) -> str:
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--force-device-scale-factor=1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.fixture(scope="module")
def shot(tmp_path_factory):
    """The report of the pinned-vs-dma-buf run as Chromium draws it: (screenshot RGB array, laid-out boxes)."""
    tmp = tmp_path_factory.mktemp("browser")
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(ROOT / "scenarios" / "pin_vs_dmabuf.yaml"), "--out", str(tmp / "r"),
                               "--quiet"]).exit_code == 0
    assert runner.invoke(app, ["report", str(tmp / "r")]).exit_code == 0
    page = tmp / "r" / "report.html"
    probe = tmp / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium(f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri())
    layout = json.loads(html.unescape(re.search(r'data-boxes="([^"]*)"', dom)[1]))
    _chromium(f"--window-size={WIDTH},{layout['height']}", f"--screenshot={tmp / 'shot.png'}", page.as_uri())
    return imread(tmp / "shot.png")[..., :3], layout["boxes"], layout["headers"]


def _crop(image: np.ndarray, box: dict) -> np.ndarray:
    top, left = int(box["y"]) + 2, int(box["x"]) + 2
    return image[top:int(box["y"] + box["h"]) - 2, left:min(int(box["x"] + box["w"]) - 2, image.shape[1])]


def ink(region: np.ndarray) -> float:
    """Share of the pixels of ``region`` that are not the white page (any channel 10 % off white)."""
    return float((region < 0.9).any(axis=-1).mean()) if region.size else 0.0


def colour(region: np.ndarray) -> int:
    """Pixels of ``region`` in colour (a plot's lines and markers), not grey."""
    return int((region.max(axis=-1) - region.min(axis=-1) > 0.25).sum())


def test_the_browser_laid_out_every_figure_diagram_and_table(shot):
    _, boxes, _ = shot
    ids = [b["id"] for b in boxes]
    assert ids == [f"table-{i}" for i in range(1, 8)] + ["figure-bw_over_time", "figure-latency_cdf"] + \
        [f"diagram-{v}" for v in ("peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify")]
    for box in boxes:  # a broken image would be its alt text's size
        assert box["w"] > 300 and box["h"] > 100, box


def test_the_screenshot_has_the_figures_and_diagrams_in_colour_where_the_page_put_them(shot):
    image, boxes, _ = shot
    for box in boxes:
        if box["kind"] == "img":
            region = _crop(image, box)
            assert ink(region) > 0.02 and colour(region) > 200, (box["id"], ink(region), colour(region))


def test_the_screenshot_has_the_tables_where_the_page_put_them(shot):
    image, boxes, _ = shot
    for box in boxes:
        if box["kind"] == "table":
            region = _crop(image, box)
            rows = (region < 0.5).any(axis=-1).any(axis=1)  # borders and text: dark pixels on most rows
            assert ink(region) > 0.08 and rows.mean() > 0.3, (box["id"], ink(region), rows.mean())


def test_beside_a_narrow_table_the_screenshot_is_blank(shot):
    """The checks above can fail: where the page put nothing, the screenshot is the white page."""
    image, boxes, _ = shot
    narrow = min((b for b in boxes if b["kind"] == "table"), key=lambda b: b["x"] + b["w"])
    beside = image[int(narrow["y"]):int(narrow["y"] + narrow["h"]), int(narrow["x"] + narrow["w"]) + 20:WIDTH - 40]
    assert beside.shape[1] >= 100, f"no table leaves room beside it: the narrowest ends at {narrow['x'] + narrow['w']}"
    assert ink(beside) == 0.0


def test_the_events_outcome_column_is_in_view_at_the_windows_width(shot):
    _, _, headers = shot
    outcomes = [h for h in headers if h["text"] in ("outcome", "competing allocation")]
    assert len(outcomes) >= 2
    for column in outcomes:  # its long outcomes wrap in their cells instead of widening the table past the window
        assert column["right"] <= WIDTH, column
