"""Losing the PostgreSQL primary: statements safe to repeat reconnect and go on, and the web
answers 503 with Retry-After while no primary is reachable (jobs/db_failover.py,
jobs/db_unavailable.py). The full failover, with a standby promoted under a running engine and
worker, is tests/faults/test_postgres_failover.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test import Client

from jobs.db_failover import UNAVAILABLE_RETRY_AFTER_S, retry_on_failover
from tests.support.api import api_client_for
from tests.support.backends import terminate_my_backend

pytestmark = pytest.mark.django_db(transaction=True)


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_statement_safe_to_repeat_reconnects_after_its_server_went_away() -> None:
    first = _backend_pid()
    terminate_my_backend()
    with pytest.raises(OperationalError):
        _backend_pid()  # without the retry, the dead connection fails the statement
    connection.close()
    second = _backend_pid()
    terminate_my_backend()
    third = retry_on_failover(_backend_pid)
    assert len({first, second, third}) == 3


@pytest.fixture
def no_primary() -> Iterator[None]:
    """Every new connection finds no server of the kind it asks for, as while a standby waits
    to be promoted: libpq refuses the only host because it is not a standby."""
    connection.close()
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    options["target_session_attrs"] = "standby"
    try:
        yield
    finally:
        options.clear()
        options.update(saved)
        connection.close()


def _primary_gone() -> None:
    connection.close()
    connection.settings_dict["OPTIONS"]["target_session_attrs"] = "standby"


def _primary_back() -> None:
    connection.settings_dict["OPTIONS"].pop("target_session_attrs")


def _operator() -> Client:
    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_the_web_answers_503_with_retry_after_while_no_primary_is_reachable(
    no_primary: None,
) -> None:
    # The key and the session are made before the primary "goes"; only the requests find none.
    _primary_back()
    alice = api_client_for("alice")
    operator = _operator()
    _primary_gone()
    response = alice.get("/v1/jobs")
    assert response.status_code == 503
    assert response["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    assert response.json()["error"]["code"] == "unavailable"
    for path in ("/status/", "/admin/jobs/job/"):
        page = operator.get(path)
        assert page.status_code == 503, path
        assert page["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S)
    # Once a primary answers again, the next requests connect to it.
    _primary_back()
    assert alice.get("/v1/jobs").status_code == 200
    assert operator.get("/status/").status_code == 200
