"""The HTML ledger report in a real headless browser (Debian's ``chromium``), without network.

The page must load without a single console message (a script, a blocked resource or a
Content-Security-Policy violation would log one), the browser's DOM must hold the hostile ids
as text, and a screenshot must show the charts. A missing chromium fails these tests (it is not
a skip): ``.ci/run`` installs it; by hand, ``apt-get install -y chromium``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gpframe as gp

from .test_report_html import EVIL_QUERY, EVIL_USER, make_ledger

#: no network, no profile, no background services: only the local file is read
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--hide-scrollbars",
    "--enable-logging=stderr", "--v=0",
)  # fmt: skip
# a console message in chromium's log: `...:INFO:CONSOLE:24] "text", source: file:///... (24)`
# (older builds: `INFO:CONSOLE(24)] ...`)
_CONSOLE = re.compile(r":CONSOLE[:(]?\d*\)?\]\s*(?P<msg>.*)$")
WIDTH, HEIGHT = 1200, 2400


def chromium() -> str:
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium")
                                       else None)  # fmt: skip
    if exe is None:
        pytest.fail(
            "Debian's chromium is needed to test the HTML ledger report in a browser and was not "
            "found: install it with `apt-get install -y chromium` (.ci/run does so as root)."
        )
    return exe


def run(page: Path, tmp: Path, *args: str) -> tuple[str, list[str]]:
    """Run chromium on ``page``; return its stdout and the console messages it logged."""
    cmd = [chromium(), *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args, page.as_uri()]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=tmp)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish within 90 s: {' '.join(cmd)}")
    assert r.returncode == 0, f"chromium failed ({r.returncode}):\n{r.stderr[-3000:]}"
    console = [m.group("msg") for line in r.stderr.splitlines() if (m := _CONSOLE.search(line))]
    return r.stdout, console


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    path = make_ledger(tmp / "ledger.sqlite")
    with gp.Session(path=str(path), readonly=True) as s:
        return gp.ledger_report_html(s, tmp / "report.html", top=8)


def test_page_loads_without_console_messages_and_its_dom_keeps_hostile_ids_as_text(page, tmp_path):
    dom, console = run(page, tmp_path, "--dump-dom")
    assert console == [], f"the page logged to the console: {console}"
    assert "Users closest to exhaustion" in dom and "</html>" in dom
    assert "<script" not in dom.lower() and "<img" not in dom.lower()
    # the browser's serialisation of the text nodes: the markup stayed text
    assert "&lt;script&gt;alert('user')&lt;/script&gt;" in dom
    assert EVIL_QUERY.replace("<", "&lt;").replace(">", "&gt;") in dom


def test_console_check_sees_an_injected_script(page, tmp_path):
    """The check above can fail: an unescaped script (blocked by the page's CSP) is logged."""
    bad = tmp_path / "bad.html"
    bad.write_text(page.read_text().replace(
        "</main>", f"<p>{EVIL_USER}<img src='http://198.51.100.1/x.png'></p></main>"
    ))  # fmt: skip
    _, console = run(bad, tmp_path, "--dump-dom")
    assert any("Content Security Policy" in m for m in console), console


def test_screenshot_shows_the_page_and_its_charts(page, tmp_path):
    from PIL import Image

    png = tmp_path / "report.png"
    _, console = run(page, tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}")
    assert console == [], console
    keep = os.environ.get("GPFRAME_REPORT_SCREENSHOT")  # to look at it: a path to copy it to
    if keep:
        shutil.copy(png, keep)
    img = np.asarray(Image.open(png).convert("RGB")).astype(np.int64)
    assert img.shape == (HEIGHT, WIDTH, 3)
    assert img.std() > 20, "the screenshot is (nearly) one colour"
    rgb = img[..., 0] << 16 | img[..., 1] << 8 | img[..., 2]
    background = np.count_nonzero(rgb == 0xF5F6F8) / rgb.size
    assert 0.05 < background < 0.95, f"page background covers {background:.0%}"
    # the charts' fills (report_html._FILL / _LIGHT): histograms, timelines and savings bars
    for colour, what in [
        (0x2B6CB0, "metric bars"),
        (0x8E44AD, "central bars"),
        (0xBCD3EE, "metric allocations"),
        (0xDCC6E6, "central allocations"),
    ]:
        n = np.count_nonzero(rgb == colour)
        assert n > 800, f"{what} (#{colour:06x}) cover only {n} pixels"
    # text is drawn (dark pixels) in the top, the middle and the bottom thirds
    dark = (img.sum(axis=2) < 200).reshape(3, -1, WIDTH)
    assert all(d.sum() > 500 for d in dark), [int(d.sum()) for d in dark]


def test_missing_chromium_fails_with_the_install_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        chromium()
