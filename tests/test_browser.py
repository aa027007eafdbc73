"""The explorer in a real browser: JupyterLab on a loopback port, driven by Debian's Chromium.

Starts JupyterLab (token, 127.0.0.1, a temporary root with a copy of 03_explorer), opens the
notebook in Chromium through Playwright, runs all cells, checks the sliders and the figures
render, moves the threshold and waits for a different attendance image. Screenshots and the
server log go to ``$MFGWORK_ARTIFACTS/browser`` (default: the test's temporary folder); the
folder is printed. Outside CI (no ``CI`` variable) the test is skipped when Chromium or
Playwright is missing; in CI it fails.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "03_explorer.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
SERVER_START_S = 60
RENDER_S = 90
UPDATE_S = 30
# JupyterLab settings for a quiet, offline session: no news, no update checks.
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                {"fetchNews": "false", "checkForUpdates": False}}


def _require(what: str, ok: bool) -> None:
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing in CI (.ci/run installs Debian's chromium)")
    pytest.skip(f"{what} is missing (apt-get install chromium; pip install playwright)")


@pytest.fixture(autouse=True)
def _browser_tools() -> None:
    """Runs before the server starts: Chromium and Playwright must be here."""
    _require("Debian's chromium (/usr/bin/chromium)", CHROMIUM.exists())
    _require("playwright (pip install playwright)", find_spec("playwright") is not None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("MFGWORK_ARTIFACTS", tmp_path)) / "browser"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"browser test artifacts: {folder}")
    return folder


@pytest.fixture
def lab(tmp_path: Path, artifacts: Path):
    """A JupyterLab server on a free loopback port: yields (base URL, token); stopped by pid."""
    root, home = tmp_path / "root", tmp_path / "jupyter"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    settings = home / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = os.environ | {"JUPYTER_CONFIG_DIR": str(home / "config"),
                        "JUPYTER_DATA_DIR": str(home / "data"),
                        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
                        "JUPYTER_PLATFORM_DIRS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                        "JUPYTER_TOKEN": token}
    log = (artifacts / "jupyterlab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--ServerApp.root_dir={root}", "--allow-root",
         "--LabApp.extension_manager=readonly",
         f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={home / 'ws'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(base, token, proc)
        yield base, token
    finally:
        _stop(proc)
        log.close()


def _wait_for_server(base: str, token: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {proc.returncode} (see jupyterlab.log)")
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer on {base} within {SERVER_START_S} s")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's pid (it shuts its kernels down), SIGKILL if it hangs."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _pixels(png: bytes):
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB")


def test_explorer_renders_and_redraws_in_jupyterlab(lab, artifacts):
    from PIL import ImageChops
    from playwright.sync_api import expect, sync_playwright

    base, token = lab
    started = time.monotonic()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        try:
            page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.sessionContext !== undefined",
                timeout=RENDER_S * 1000)
            page.evaluate("""async () => {
                const panel = window.jupyterapp.shell.currentWidget;
                await panel.context.ready;
                await panel.sessionContext.ready;
            }""")
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

            explorer = page.locator(".mfg-explorer")
            # the explorer, or what shows instead: its text repr (no widget manager in the
            # page) or a traceback; fail at once with what the notebook shows
            page.locator(", ".join([
                ".mfg-explorer", ".jp-OutputArea-output:has-text('VBox(children')",
                ".jp-OutputArea-output:has-text('Traceback (most recent call last)')",
            ])).first.wait_for(timeout=RENDER_S * 1000)
            if not explorer.count():
                shown = page.locator(".jp-OutputArea-output").all_inner_texts()
                pytest.fail(f"the explorer widget did not render; outputs: {shown}"[:3000])
            # the widget's parts render one after another: wait for each (expect retries)
            waiting = {"timeout": RENDER_S * 1000}
            expect(explorer.locator(".widget-slider")).to_have_count(6, **waiting)
            for name in ("threshold", "sigma", "good", "bad", "eps", "T"):
                expect(explorer.locator(f".mfg-{name} .noUi-handle")).to_be_visible(**waiting)
            threshold = explorer.locator(".mfg-threshold")
            expect(threshold.locator(".widget-readout")).to_have_text("0.60", **waiting)
            plot = explorer.locator("img.mfg-attendance-plot")
            for name in ("attendance", "density", "convergence"):
                page.wait_for_function(
                    "el => el.complete && el.naturalWidth > 100",
                    arg=explorer.locator(f"img.mfg-{name}-plot").element_handle(),
                    timeout=RENDER_S * 1000)
            expect(explorer.locator(".mfg-status")).to_have_text(
                re.compile(r"^A\* = 0\.60: converged in \d+ iterations"), **waiting)
            explorer.scroll_into_view_if_needed()
            before = plot.screenshot()
            page.screenshot(path=artifacts / "explorer_before.png", full_page=True)
            src = plot.get_attribute("src")
            rendered = time.monotonic() - started

            readout = threshold.locator(".widget-readout")
            readout.fill("0.45")
            readout.press("Enter")
            changed = time.monotonic()
            page.wait_for_function(
                "([el, src, status]) => el.src !== src && el.complete"
                " && status.innerText.startsWith('A* = 0.45')",
                arg=[plot.element_handle(), src, explorer.locator(".mfg-status").element_handle()],
                timeout=UPDATE_S * 1000)
            update_s = time.monotonic() - changed
            after = plot.screenshot()
            page.screenshot(path=artifacts / "explorer.png", full_page=True)
            expect(readout).to_have_text("0.45", **waiting)
            expect(explorer.locator(".mfg-status")).to_have_text(
                re.compile(r"^A\* = 0\.45: converged in \d+ iterations"), **waiting)
            diff = np.asarray(ImageChops.difference(_pixels(before), _pixels(after)))
            changed_px = int(np.count_nonzero(diff.max(axis=-1) > 32))
            assert changed_px > 200, f"attendance plot barely changed ({changed_px} pixels)"
        except Exception:
            page.screenshot(path=artifacts / "failure.png", full_page=True)
            raise
        finally:
            browser.close()
    print(f"explorer rendered {rendered:.1f} s after opening the page; threshold change → new "
          f"attendance image in {update_s:.2f} s; {changed_px} pixels changed")
