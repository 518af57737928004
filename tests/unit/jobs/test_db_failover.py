"""Which database errors mean the primary is lost, and the bounded reconnect-and-retry loop
(on a FakeClock: the waits are counted, never slept)."""

from __future__ import annotations

import psycopg
import pytest
from django import db
from psycopg import errors as pg_errors

from jobs.db_failover import FailoverRetry, backoff_s, connection_lost
from tests.support.clock import FakeClock


def _django(kind: type[db.Error], cause: BaseException) -> db.Error:
    """As Django's DatabaseErrorWrapper raises it: its own class, psycopg's error as cause."""
    error = kind(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error",
    [
        _django(db.OperationalError, psycopg.OperationalError("server closed the connection")),
        _django(db.OperationalError, pg_errors.AdminShutdown()),
        _django(db.OperationalError, pg_errors.CannotConnectNow()),
        _django(db.InternalError, pg_errors.ReadOnlySqlTransaction()),
        _django(db.OperationalError, pg_errors.ConnectionFailure()),
        db.InterfaceError("connection already closed"),
    ],
    ids=["socket-closed", "admin-shutdown", "in-recovery", "demoted", "08006", "closed"],
)
def test_errors_of_a_lost_primary(error: db.Error) -> None:
    assert connection_lost(error)


@pytest.mark.parametrize(
    "error",
    [
        _django(db.OperationalError, pg_errors.DeadlockDetected()),
        _django(db.OperationalError, pg_errors.SerializationFailure()),
        _django(db.OperationalError, pg_errors.QueryCanceled()),
        _django(db.IntegrityError, pg_errors.UniqueViolation()),
        db.OperationalError("no cause"),
        ValueError("not a database error"),
    ],
    ids=["deadlock", "serialization", "statement-timeout", "unique", "bare", "other"],
)
def test_errors_of_a_live_connection(error: Exception) -> None:
    assert not connection_lost(error)


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_retry_reconnects_until_the_primary_answers() -> None:
    clock = FakeClock()
    started = clock.monotonic()
    calls: list[float] = []

    def statement() -> str:
        calls.append(clock.monotonic() - started)
        if len(calls) < 4:
            raise _django(db.OperationalError, pg_errors.AdminShutdown())
        return "done"

    assert FailoverRetry(clock=clock, window_s=30).run(statement) == "done"
    assert calls == pytest.approx([0.0, 0.05, 0.15, 0.35])


def test_retry_gives_up_at_the_end_of_its_window() -> None:
    clock = FakeClock()
    started = clock.monotonic()
    calls = 0

    def statement() -> None:
        nonlocal calls
        calls += 1
        raise _django(db.OperationalError, psycopg.OperationalError("no host accepted"))

    with pytest.raises(db.OperationalError):
        FailoverRetry(clock=clock, window_s=5).run(statement)
    assert clock.monotonic() - started <= 5
    # 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1 + 1 + 1 = 4.55 s of waits, then the next would pass 5.
    assert calls == 9


def test_other_errors_are_not_retried() -> None:
    calls = 0

    def statement() -> None:
        nonlocal calls
        calls += 1
        raise _django(db.OperationalError, pg_errors.DeadlockDetected())

    with pytest.raises(db.OperationalError):
        FailoverRetry(clock=FakeClock(), window_s=30).run(statement)
    assert calls == 1
