"""A run that waited for its target's rate limit, or was answered 429/503, is explained by the
target's waits, with their counts, not as a late engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from beat_engine.schedules import ScheduleSpec
from jobs.explain_rules import Facts, ReasonFact, RunFact, Verdict, explain

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _facts(*reasons: ReasonFact) -> Facts:
    run = RunFact(
        id="r1", state="succeeded", trigger="schedule", scheduled_for=T0, attempt=1,
        lateness=timedelta(seconds=0.1), start_lag=timedelta(seconds=9), published_at=None,
        started_at=None, finished_at=None, last_error="",
    )  # fmt: skip
    return Facts(
        at=T0,
        spec=ScheduleSpec.from_cron("* * * * *"),
        job_status="active",
        job_created_at=T0 - timedelta(days=1),
        job_next_fire_at=T0 + timedelta(minutes=1),
        run=run,
        reasons=reasons,
    )


def _waited(kind: str, count: int, detail: str) -> ReasonFact:
    return ReasonFact(kind, T0, T0, count, T0 + timedelta(seconds=1), T0 + timedelta(seconds=9),
                      detail)  # fmt: skip


def test_a_run_held_by_its_targets_bucket_is_explained_by_it() -> None:
    held = _waited("deferred_target_limit", 4, "target api.test: 2/s, burst 1")
    result = explain(_facts(held), now=T0 + timedelta(minutes=5))
    assert result.verdict == Verdict.DEFERRED_TARGET_LIMIT
    assert "rate limit held it 4 times" in result.reason
    assert "api.test: 2/s" in result.reason
    assert result.evidence["recorded"]["count"] == 4


def test_throttled_answers_are_counted_beside_the_limits_waits() -> None:
    held = _waited("deferred_target_limit", 2, "target api.test: 2/s, burst 1")
    throttled = _waited("throttled_by_target", 1, "HTTP 429 from target api.test")
    result = explain(_facts(held, throttled), now=T0 + timedelta(minutes=5))
    assert result.verdict == Verdict.DEFERRED_TARGET_LIMIT
    assert "held it 2 times" in result.reason
    assert "answered 429/503 1 time," in result.reason


def test_without_a_target_wait_a_run_is_fired() -> None:
    assert explain(_facts(), now=T0 + timedelta(minutes=5)).verdict == Verdict.FIRED
