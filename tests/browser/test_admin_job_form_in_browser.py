"""The admin's job form in headless Chromium: the live schedule preview follows what is typed,
and the form creates the job; no console error."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

from jobs.models import Job
from tests.browser.test_status_in_browser import PASSWORD, _console_errors, _screenshot
from tests.support.factories import tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _preview_text(driver: webdriver.Chrome) -> str:
    return str(driver.find_element(By.ID, "schedule-live-preview").text)


def _type(driver: webdriver.Chrome, field: str, text: str) -> None:
    box = driver.find_element(By.ID, f"id_{field}")
    box.clear()
    box.send_keys(text)


def test_job_form_previews_the_typed_schedule_and_creates_the_job(
    browser: webdriver.Chrome, live_server: object, screenshots_dir: Path
) -> None:
    tenant = tenant_factory("acme-corp")
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    base = str(live_server)
    browser.get(f"{base}/admin/login/?next=/admin/jobs/job/add/")
    browser.find_element(By.ID, "id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form [type=submit]").click()
    # The polls read text of elements the page replaces (the preview as it re-renders, the
    # body as the save navigates): an element gone between find and read is polled again.
    wait = WebDriverWait(browser, 15, ignored_exceptions=[StaleElementReferenceException])
    wait.until(expected_conditions.presence_of_element_located((By.ID, "schedule-live-preview")))

    _type(browser, "cron_expression", "30 6 * * 1-5")
    _type(browser, "timezone", "Asia/Tokyo")
    wait.until(lambda d: "Asia/Tokyo" in _preview_text(d))
    preview = _preview_text(browser)
    firings = [
        li.text for li in browser.find_elements(By.CSS_SELECTOR, "#schedule-live-preview li")
    ]
    _screenshot(browser, screenshots_dir / "admin-job-add.png")

    _type(browser, "cron_expression", "61 * * * *")
    wait.until(lambda d: "out of range" in _preview_text(d))
    _type(browser, "cron_expression", "30 6 * * 1-5")
    Select(browser.find_element(By.ID, "id_tenant")).select_by_visible_text("acme-corp")
    _type(browser, "name", "tokyo-morning-report")
    _type(browser, "target_name", "demo.heartbeat")
    browser.find_element(By.CSS_SELECTOR, "input[name=_save]").click()
    wait.until(expected_conditions.url_contains("/admin/jobs/job/"))
    wait.until(lambda d: "was added successfully" in d.find_element(By.TAG_NAME, "body").text)

    assert preview.startswith("At 06:30, Monday through Friday")
    assert len(firings) == 10
    assert all(f.endswith("T06:30:00+09:00") for f in firings)
    assert not _console_errors(browser)
    job = Job.objects.get(name="tokyo-morning-report")
    assert (job.tenant, job.cron_expression, job.timezone) == (tenant, "30 6 * * 1-5", "Asia/Tokyo")
