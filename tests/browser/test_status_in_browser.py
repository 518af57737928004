"""Every status page and the admin's job pages in headless Chromium: no console error, charts
with data, and a screenshot of each (docs/img/status-*.png when STATUS_SCREENSHOTS_DIR=docs/img).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from beat_engine.db_clock import read_database_clock
from tests.browser.seed import seed

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-test-pw-1"  # a throwaway account of the test database


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    # Every chart on the page must have data points; False for pages without charts.
    charts: bool
    # Text the page must show (what the seeded data makes it say), in the element selected.
    shows: str
    where: str = "body"


def _console_errors(driver: webdriver.Chrome) -> list[str]:
    # Chromium asks every origin for /favicon.ico; its 404 is the browser's, not the page's.
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]


def _log_in(driver: webdriver.Chrome, base: str) -> None:
    driver.get(f"{base}/admin/login/?next=/status/")
    driver.find_element(By.ID, "id_username").send_keys("operator")
    driver.find_element(By.ID, "id_password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
    WebDriverWait(driver, 10).until(expected_conditions.url_contains("/status/"))


def _screenshot(driver: webdriver.Chrome, path: Path) -> None:
    # The whole page, not only the first screenful (bounded, so a long table stays readable).
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1366, max(600, min(int(height), 2200)))
    driver.save_screenshot(str(path))
    driver.set_window_size(1366, 900)


def _chart_points(driver: webdriver.Chrome) -> list[tuple[str, int]]:
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    return [
        (chart.get_attribute("aria-label") or "", int(chart.get_attribute("data-points") or 0))
        for chart in charts
    ]


def test_status_and_admin_pages_render_in_chromium(
    browser: webdriver.Chrome, live_server: object, screenshots_dir: Path
) -> None:
    now = read_database_clock()
    data = seed(now)
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    base = str(live_server)
    why = urlencode({"job": data.paused.pk, "at": data.missed_firing.isoformat()})
    pages = [
        Page("overview", "/status/", charts=True, shows="Beat nodes"),
        Page("job", f"/status/jobs/{data.job.pk}/", charts=True, shows="settle-invoices"),
        Page("run", f"/status/runs/{data.run.pk}/", charts=False, shows="FAILURE",
             where="#stored-results"),
        Page("upcoming", "/status/upcoming/", charts=True, shows="nightly-report-00",
             where="#peaks"),
        Page("why", f"/status/why/?{why}", charts=False, shows="paused", where=".verdict"),
        Page("admin-jobs", "/admin/jobs/job/", charts=False, shows="settle-invoices"),
        Page("admin-job", f"/admin/jobs/job/{data.job.pk}/change/", charts=False,
             shows="settle-invoices"),
    ]  # fmt: skip

    _log_in(browser, base)
    problems: list[str] = []
    for page in pages:
        browser.get(base + page.path)
        WebDriverWait(browser, 15).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )
        found = browser.find_elements(By.CSS_SELECTOR, page.where)
        if not found or page.shows not in found[0].text:
            problems.append(f"{page.name}: {page.shows!r} not in {page.where}")
        errors = _console_errors(browser)
        if errors:
            problems.append(f"{page.name}: console errors {errors}")
        if page.charts:
            points = _chart_points(browser)
            if not points:
                problems.append(f"{page.name}: no chart")
            problems += [f"{page.name}: chart {t!r} has no data" for t, n in points if n <= 0]
        _screenshot(browser, screenshots_dir / f"status-{page.name}.png")
    assert not problems, "\n".join(problems)
    for page in pages:
        assert (screenshots_dir / f"status-{page.name}.png").stat().st_size > 10_000, page.name
