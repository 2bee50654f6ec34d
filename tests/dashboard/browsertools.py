"""Helpers for the grid's browser tests: a restartable ``coverfarm serve``, workers, gates, Chromium.

Chromium is Debian's (``apt-get install chromium chromium-driver``), driven by Selenium through
/usr/bin/chromedriver; nothing is downloaded. Without it the browser tests skip and say why.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from farmkit import free_port, session_broker, start_server, start_worker, stop

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

LIVE_DATABASE = "coverfarm_test_dashboard_live"
LIVE_BROKER = session_broker(11)
CHROMIUM = os.environ.get("COVERFARM_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("COVERFARM_CHROMEDRIVER", "/usr/bin/chromedriver")
# The flags the farm's machines need: no sandbox (root in a container), nothing fetched in the background.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--lang=en-US",
]
LAPTOP = (1366, 768)
# Policies that no engine knows, for a sweep of more rows than the grid renders at once (dashboard ROWS),
# whose cells the test stores itself.
BIG_SWEEP = [f"row{index:03d}" for index in range(120)]
SAVED: list[Path] = []  # this session's screenshots, listed at the end of the run


HERE = Path(__file__).resolve().parent  # the gated stand-in engine (gated_engine.py), for the workers


def require_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        install = "apt-get install chromium chromium-driver fonts-noto-color-emoji"
        pytest.skip(f"Chromium is not installed ({', '.join(missing)} missing): {install}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium, see requirements/lock.txt)")


def chromium(javascript: bool) -> WebDriver:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='coverfarm-chromium-')}"]:
        options.add_argument(flag)
    options.add_argument(f"--window-size={LAPTOP[0]},{LAPTOP[1]}")
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    return driver


def screenshot_dir(create: bool = True) -> Path:
    directory = Path(
        os.environ.get("COVERFARM_SCREENSHOTS", Path(tempfile.gettempdir()) / "coverfarm-screenshots")
    )
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    return directory


def save_screenshot(driver: WebDriver, name: str, full_height: bool = False) -> Path:
    """The viewport (a laptop's), or the whole page when ``full_height``; the path is printed."""
    path = screenshot_dir() / f"{name}.png"
    if full_height:
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        path.write_bytes(base64.b64decode(shot["data"]))
    else:
        driver.save_screenshot(str(path))
    SAVED.append(path)
    print(f"screenshot: {path}")
    return path


class Orchestrator:
    """``coverfarm serve`` on a port of its own, which keeps its port across a restart."""

    def __init__(self, live_env: dict[str, str], log_dir: Path) -> None:
        self.env = live_env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = self.log_dir / f"serve-{self.starts}.log"
        self.process, _ = start_server(self.env, log, port=self.port, path=[HERE])

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None


def start_grid_worker(live_env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A worker running the gated stand-in engine."""
    return start_worker(live_env, log, "grid", path=[HERE])


class Gates:
    """Where the gated stand-in engine waits (tests/dashboard/gated_engine.py)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def open(self, policy: str, backend: str) -> None:
        (self.directory / f"{policy}-{backend}").touch()

    def open_all(self) -> None:
        (self.directory / "all").touch()

    def close_all(self) -> None:
        for gate in self.directory.iterdir():
            gate.unlink()


def wait_until(driver: WebDriver, script: str, timeout: float, what: str, *args: Any) -> Any:
    """Wait until ``script`` (a JavaScript expression's body, ``return ...``) is truthy in the page."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script, *args)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def cell_texts(driver: WebDriver, cell_id: int) -> list[str]:
    texts: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('td[data-cell=\"' + arguments[0] + '\"]'))"
        ".map(td => td.textContent.replace(/\\s+/g, ' ').trim())",
        cell_id,
    )
    return texts
