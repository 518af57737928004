"""What each attempt result means for the run: tables of statuses and attempts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from beat_engine.backoff import RetryPolicy
from jobs.outcomes import (
    Disposition,
    ResultKind,
    bounded_result,
    classify_http_status,
    disposition_for,
)

POLICY = RetryPolicy(max_attempts=3, base_delay=timedelta(seconds=1), max_delay=timedelta(10))


@pytest.mark.parametrize(
    ("status", "retry_on_client_error", "kind"),
    [
        (200, False, ResultKind.SUCCESS),
        (204, False, ResultKind.SUCCESS),
        (302, False, ResultKind.PERMANENT),
        (400, False, ResultKind.PERMANENT),
        (404, False, ResultKind.PERMANENT),
        (404, True, ResultKind.RETRYABLE),
        (408, False, ResultKind.RETRYABLE),
        (429, False, ResultKind.RETRYABLE),
        (500, False, ResultKind.RETRYABLE),
        (503, False, ResultKind.RETRYABLE),
    ],
)
def test_http_status_classification(
    status: int, retry_on_client_error: bool, kind: ResultKind
) -> None:
    assert classify_http_status(status, retry_on_client_error=retry_on_client_error) == kind


@pytest.mark.parametrize(
    ("kind", "attempt", "disposition"),
    [
        (ResultKind.SUCCESS, 1, Disposition.SUCCEED),
        (ResultKind.DUPLICATE, 3, Disposition.SUCCEED),
        (ResultKind.RETRYABLE, 1, Disposition.RETRY),
        (ResultKind.RETRYABLE, 2, Disposition.RETRY),
        (ResultKind.RETRYABLE, 3, Disposition.DEAD),
        (ResultKind.TIMEOUT, 1, Disposition.RETRY),
        (ResultKind.TIMEOUT, 3, Disposition.DEAD),
        (ResultKind.PERMANENT, 1, Disposition.FAIL),
        (ResultKind.CANCELLED, 1, Disposition.CANCEL),
        (ResultKind.LOST, 1, Disposition.CANCEL),
    ],
)
def test_disposition_spends_the_attempt_budget_only_on_retryable_failures(
    kind: ResultKind, attempt: int, disposition: Disposition
) -> None:
    assert disposition_for(kind, attempt=attempt, policy=POLICY) == disposition


def test_a_replayed_run_past_its_budget_dead_letters_on_its_next_failure() -> None:
    assert disposition_for(ResultKind.RETRYABLE, attempt=4, policy=POLICY) == Disposition.DEAD


def test_bounded_result_keeps_small_values_and_cuts_large_ones() -> None:
    assert bounded_result({"a": [1, 2]}, max_bytes=100) == {"a": [1, 2]}
    cut = bounded_result("x" * 1000, max_bytes=50)
    assert cut["truncated"] is True
    assert len(cut["preview"]) == 50


def test_bounded_result_stores_non_json_values_as_text() -> None:
    assert bounded_result({"at": object}, max_bytes=100) == {"at": str(object)}
