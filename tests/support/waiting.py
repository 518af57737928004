"""Waiting for real processes in tests, and the URL of pytest-django's test database."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from django.db import connection


def wait_until(
    predicate: Callable[[], bool], *, timeout_s: float = 60.0, what: str = "condition"
) -> None:
    """Poll until ``predicate`` holds; the timeout only stops a hung test, it asserts no speed."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def test_database_url() -> str:
    """DATABASE_URL with the database swapped for pytest-django's test_<name> database."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + str(connection.settings_dict["NAME"])))


test_database_url.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name
