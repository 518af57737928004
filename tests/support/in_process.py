"""Running the executor in the test process: the statements a piece of code sends, and the
result writer stopped before the test database goes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from jobs import result_writer


def statements_of(action: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``action``'s result and the SQL it sent through this thread's connection, in order."""
    seen: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        result = action()
    return result, seen


@pytest.fixture(scope="module")
def result_writer_stopped(django_db_blocker: Any) -> Iterator[None]:
    """For a module that executes runs in this process (import it, then use it autouse or
    with ``usefixtures``)."""
    yield
    # Runs executed in this process hand their stored results to its writer thread: end it,
    # and its database connection, before the test database is dropped.
    with django_db_blocker.unblock():
        result_writer.stop()
