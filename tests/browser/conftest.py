"""Fixtures of the browser test: Debian's headless Chromium (installed here when missing)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.browser import chromium

SCREENSHOTS_ENV = "STATUS_SCREENSHOTS_DIR"


@pytest.fixture(scope="session")
def chromium_binaries() -> chromium.Chromium:
    try:
        return chromium.ensure()
    except chromium.ChromiumUnavailable as exc:
        if chromium.required():
            pytest.fail(f"CI=true and no headless Chromium: {exc}")
        pytest.skip(f"no headless Chromium: {exc}")


@pytest.fixture
def browser(chromium_binaries: chromium.Chromium) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binaries.browser
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1366,900",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        # Only this machine: no update checks, sync or metrics, and no name resolved but ours.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromium_binaries.driver))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshots_dir() -> Path:
    """Screenshots go to $STATUS_SCREENSHOTS_DIR (docs/img refreshes the docs), else a temp dir."""
    chosen = os.environ.get(SCREENSHOTS_ENV)
    path = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="status-screenshots-"))
    path.mkdir(parents=True, exist_ok=True)
    return path
