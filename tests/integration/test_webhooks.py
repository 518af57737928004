"""Notification webhooks on real PostgreSQL and Redis, delivered to a local receiver: a dead
letter makes one signed POST, a failing receiver is retried with backoff, sustained lateness
notifies once per window, and nothing is sent from the worker's outcome path."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.conf import settings

from jobs.models import JobRun
from jobs.models_notifications import (
    DeliveryState,
    LatenessAlert,
    NotificationDelivery,
    NotificationWebhook,
)
from jobs.services.lateness_alerts import lateness_check, window_start
from jobs.services.notifications import deliver_due
from jobs.services.runs import run_dead_letter
from jobs.services.webhooks import webhook_create, webhook_secret, webhook_signature
from jobs.states import RunState
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, running_run_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.webhook_receiver import WebhookReceiver
from tests.support.webhook_receiver import webhook_receiver_fixture as webhook_receiver_fixture

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = T0 + timedelta(minutes=5)
# Tests whose writes and reads all happen on the test's own connection need no commits: rolled
# back, they skip the flush of every table a transactional test ends with.
_ROLLED_BACK = pytest.mark.django_db


def _hook(
    receiver: WebhookReceiver, tenant: object, path: str, events: list[str]
) -> tuple[NotificationWebhook, str]:
    return webhook_create(
        tenant=tenant,  # type: ignore[arg-type]
        name=path.strip("/"),
        url=receiver.url(path),
        events=events,
        now=T0,
    )


def _dead_letter(tenant: object) -> JobRun:
    """A run dead-lettered by the worker's outcome service, as a failing last attempt does."""
    job = job_factory(tenant, max_attempts=1)  # type: ignore[arg-type]
    run = running_run_factory(job, scheduled_for=T0 + timedelta(minutes=1))
    state = run_dead_letter(run_id=run.id, attempt=1, error="boom: target failed", now=NOW)
    assert state == RunState.DEAD
    return run


@_ROLLED_BACK
def test_a_dead_letter_makes_one_signed_post_with_the_documented_body(
    webhook_receiver: WebhookReceiver,
) -> None:
    tenant = tenant_factory()
    hook, secret = _hook(webhook_receiver, tenant, "/dead", ["dead_letter"])
    _hook(webhook_receiver, tenant, "/late-only", ["sustained_lateness"])
    other = tenant_factory()
    _hook(webhook_receiver, other, "/other-tenant", ["dead_letter"])

    run = _dead_letter(tenant)
    # Recorded with the outcome; nothing was sent from the worker's path.
    assert webhook_receiver.received == []
    assert NotificationDelivery.objects.filter(state=DeliveryState.PENDING).count() == 1

    assert deliver_due(now=NOW) == 1
    assert deliver_due(now=NOW + timedelta(hours=1)) == 0, "delivered once"
    [request] = webhook_receiver.received
    assert request.path == "/dead"
    body = json.loads(request.body)
    assert body == {
        "event": "dead_letter",
        "tenant": tenant.name,
        "job_id": str(run.job_id),
        "job_name": run.job.name,
        "run_id": str(run.id),
        "scheduled_for": "2026-01-01T00:01:00+00:00",
        "attempts": 1,
        "error": "boom: target failed",
        "moved_at": "2026-01-01T00:05:00+00:00",
    }
    stamp = int(NOW.timestamp())
    assert secret == webhook_secret(hook.id, 1)
    assert request.headers["X-Scheduler-Signature"] == webhook_signature(
        secret, stamp, request.body
    )
    # As a receiver verifies it (docs/operations.md, "Notifications"), independently.
    fields = dict(
        part.split("=", 1) for part in request.headers["X-Scheduler-Signature"].split(",")
    )
    assert fields["t"] == str(stamp)
    mac = hmac.new(secret.encode(), f"{fields['t']}.".encode() + request.body, hashlib.sha256)
    assert hmac.compare_digest(mac.hexdigest(), fields["v1"])
    assert request.headers["X-Scheduler-Event"] == "dead_letter"
    delivery = NotificationDelivery.objects.get()
    assert request.headers["X-Scheduler-Delivery"] == str(delivery.id)
    assert delivery.state == DeliveryState.DELIVERED
    assert delivery.last_status == 200


@_ROLLED_BACK
def test_a_receiver_answering_500_is_retried_with_backoff_then_delivered(
    webhook_receiver: WebhookReceiver,
) -> None:
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/flaky", ["dead_letter"])
    webhook_receiver.script["/flaky"] = [500]
    _dead_letter(tenant)

    assert deliver_due(now=NOW) == 1
    delivery = NotificationDelivery.objects.get()
    assert delivery.state == DeliveryState.PENDING
    assert delivery.attempts == 1
    assert delivery.last_status == 500
    assert delivery.next_attempt_at > NOW
    assert deliver_due(now=NOW) == 0, "not due before its backoff"
    assert deliver_due(now=NOW + timedelta(hours=2)) == 1
    assert [r.path for r in webhook_receiver.received] == ["/flaky", "/flaky"]
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED
    assert delivery.attempts == 2


@_ROLLED_BACK
def test_a_receiver_that_keeps_failing_ends_failed_after_the_last_attempt(
    webhook_receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.SCHEDULER, "WEBHOOK_MAX_ATTEMPTS", 2)
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/down", ["dead_letter"])
    webhook_receiver.script["/down"] = [503, 503, 503]
    _dead_letter(tenant)
    deliver_due(now=NOW)
    deliver_due(now=NOW + timedelta(hours=2))
    assert deliver_due(now=NOW + timedelta(hours=4)) == 0
    delivery = NotificationDelivery.objects.get()
    assert delivery.state == DeliveryState.FAILED
    assert delivery.attempts == 2
    assert len(webhook_receiver.received) == 2


@_ROLLED_BACK
def test_a_disabled_webhook_gets_no_delivery(webhook_receiver: WebhookReceiver) -> None:
    tenant = tenant_factory()
    hook, _ = _hook(webhook_receiver, tenant, "/off", ["dead_letter"])
    NotificationWebhook.objects.filter(id=hook.id).update(enabled=False)
    _dead_letter(tenant)
    assert not NotificationDelivery.objects.exists()


def test_a_run_dead_lettered_by_the_engines_reaper_is_notified_by_the_engine(
    webhook_receiver: WebhookReceiver, redis_client: redis.Redis
) -> None:
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/reaped", ["dead_letter"])
    job = job_factory(tenant, max_attempts=1, interval=timedelta(hours=1))
    run = running_run_factory(job, scheduled_for=T0 + timedelta(minutes=1))
    engine = make_engine(FakeClock(T0 + timedelta(minutes=2)))  # the run's lease has expired
    try:
        engine.tick()
        assert JobRun.objects.get(id=run.id).state == RunState.DEAD
        # The tick only woke the delivery thread; the POST is made there.
        wait_until(lambda: len(webhook_receiver.received) == 1, timeout_s=20, what="the POST")
        body = json.loads(webhook_receiver.received[0].body)
        assert body["run_id"] == str(run.id)
        assert "lease expired" in body["error"]
    finally:
        engine.shutdown()


def _late_runs(tenant: object, count: int, late: timedelta) -> datetime:
    """``count`` runs published ``late`` after their instant by the engine; returns its now."""
    for _ in range(count):
        job_factory(tenant, interval=timedelta(hours=1))  # type: ignore[arg-type]
    clock = FakeClock(T0 + timedelta(hours=1) + late)
    make_engine(clock).tick()
    return clock.now()


def test_sustained_lateness_is_notified_once_per_window(
    webhook_receiver: WebhookReceiver, redis_client: redis.Redis
) -> None:
    late, on_time = tenant_factory(), tenant_factory()
    _hook(webhook_receiver, late, "/late", ["sustained_lateness"])
    _hook(webhook_receiver, on_time, "/fine", ["sustained_lateness", "dead_letter"])
    for job in range(3):
        job_factory(on_time, interval=timedelta(hours=1), name=f"fine-{job}")
    now = _late_runs(late, 12, timedelta(seconds=3))
    JobRun.objects.filter(tenant=on_time).update(lateness=timedelta(milliseconds=100))

    first = lateness_check(now=now)
    again = lateness_check(now=now + timedelta(seconds=30))
    assert (first.alerts, first.deliveries) == (1, 1)
    assert (again.alerts, again.deliveries) == (0, 0), "once per window"
    alert = LatenessAlert.objects.get()
    assert alert.tenant_id == late.id
    assert alert.p99_s == pytest.approx(3.0)
    assert alert.window_start == window_start(now, timedelta(minutes=5))

    assert deliver_due(now=now) == 1
    [request] = webhook_receiver.received
    assert request.path == "/late"
    body = json.loads(request.body)
    assert body["event"] == "sustained_lateness"
    assert body["lateness_p99_s"] == pytest.approx(3.0)
    assert body["runs"] == 12
    assert body["threshold_s"] == 1.0
    assert body["window_s"] == 300.0


def test_too_few_late_runs_are_not_sustained(
    webhook_receiver: WebhookReceiver, redis_client: redis.Redis
) -> None:
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/few", ["sustained_lateness"])
    now = _late_runs(tenant, 3, timedelta(seconds=5))
    assert lateness_check(now=now).alerts == 0


@_ROLLED_BACK
def test_window_start_is_aligned() -> None:
    at = datetime(2026, 1, 1, 10, 7, 31, tzinfo=UTC)
    assert window_start(at, timedelta(minutes=5)) == datetime(2026, 1, 1, 10, 5, tzinfo=UTC)


@_ROLLED_BACK
def test_deliveries_and_alerts_past_the_retention_are_purged(
    webhook_receiver: WebhookReceiver,
) -> None:
    from jobs.services.reasons import reasons_purge

    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/old", ["dead_letter"])
    _dead_letter(tenant)
    _dead_letter(tenant)
    old, new = NotificationDelivery.objects.order_by("id")
    NotificationDelivery.objects.filter(id=old.id).update(created_at=NOW - timedelta(days=31))
    LatenessAlert.objects.create(
        tenant=tenant, window_start=T0, p99_s=2.0, runs=10, created_at=NOW - timedelta(days=31)
    )
    deleted = reasons_purge(now=NOW)
    assert deleted["jobs_notificationdelivery"] == 1
    assert deleted["jobs_latenessalert"] == 1
    assert list(NotificationDelivery.objects.values_list("id", flat=True)) == [new.id]


def test_a_hanging_receiver_holds_neither_the_worker_nor_the_engines_tick(
    webhook_receiver: WebhookReceiver, redis_client: redis.Redis
) -> None:
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/hang", ["dead_letter"])
    _dead_letter(tenant)  # returns although the receiver would hang: nothing is sent here
    clock = FakeClock(NOW)
    engine = make_engine(clock)
    try:
        engine.tick()  # wakes the delivery thread, which is then stuck in the receiver
        wait_until(webhook_receiver.entered.is_set, timeout_s=20, what="the delivery")
        for _ in range(3):  # ticks go on meanwhile; if one waited for the receiver, it hangs
            clock.advance(timedelta(seconds=2))
            engine.tick()
        assert NotificationDelivery.objects.get().state == DeliveryState.PENDING
    finally:
        webhook_receiver.release.set()
        engine.shutdown()
    wait_until(
        lambda: NotificationDelivery.objects.get().state == DeliveryState.DELIVERED,
        timeout_s=20,
        what="the delivery to finish once the receiver answers",
    )


def test_two_nodes_sending_at_once_deliver_each_notification_once(
    webhook_receiver: WebhookReceiver,
) -> None:
    import threading

    from django.db import connection

    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/race", ["dead_letter"])
    for _ in range(10):
        _dead_letter(tenant)
    barrier = threading.Barrier(2)
    taken: list[int] = []

    def node() -> None:
        try:
            barrier.wait()
            taken.append(deliver_due(now=NOW, limit=20))
        finally:
            connection.close()

    threads = [threading.Thread(target=node) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(taken) == 10
    assert len(webhook_receiver.to("/race")) == 10
    ids = {r.headers["X-Scheduler-Delivery"] for r in webhook_receiver.to("/race")}
    assert len(ids) == 10
    assert set(NotificationDelivery.objects.values_list("state", flat=True)) == {"delivered"}


def test_the_node_holding_partition_0_checks_lateness_every_minute_and_notifies(
    webhook_receiver: WebhookReceiver, redis_client: redis.Redis
) -> None:
    tenant = tenant_factory()
    _hook(webhook_receiver, tenant, "/late-engine", ["sustained_lateness"])
    for _ in range(12):
        job_factory(tenant, interval=timedelta(hours=1))
    clock = FakeClock(T0 + timedelta(hours=1, seconds=3))  # every firing published 3 s late
    engine = make_engine(clock)
    try:
        engine.tick()
        assert 0 in engine.leases
        assert not LatenessAlert.objects.exists(), "the first check comes a minute in"
        clock.advance(timedelta(seconds=61))
        engine.tick()
        wait_until(lambda: len(webhook_receiver.to("/late-engine")) == 1, timeout_s=20,
                   what="the lateness notification")  # fmt: skip
        clock.advance(timedelta(seconds=61))  # the same 5-minute window: checked, not sent
        engine.tick()
        wait_until(lambda: engine._webhooks.wait_idle(0), timeout_s=20, what="the check")
    finally:
        engine.shutdown()
    assert LatenessAlert.objects.count() == 1
    assert len(webhook_receiver.to("/late-engine")) == 1
