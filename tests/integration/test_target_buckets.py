"""Per-target token buckets: the Lua scripts on real Redis with an injected clock, and which
bucket a run's target resolves to from its tenant's rows and its job's fields."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import TargetLimit
from jobs.target_limits import Bucket, BucketStore, LimitCache, bucket_for
from jobs.targets import TargetSpec
from tests.support.clock import FakeClock
from tests.support.factories import T0, tenant_factory

pytestmark = [pytest.mark.integration]

RATE, BURST = 5.0, 3


@pytest.fixture
def buckets(redis_client: redis.Redis) -> BucketStore:
    return BucketStore(redis_client)


def _bucket(rate: float = RATE, burst: int = BURST, key: str = "1:api.test") -> Bucket:
    return Bucket(key, 1, "api.test", rate, burst)


def _spec(**fields: object) -> TargetSpec:
    base: dict[str, object] = {
        "kind": "http", "name": "", "url": "https://API.test:8443/hook", "headers": {},
        "timeout": timedelta(seconds=5), "retry_on_client_error": False,
    }  # fmt: skip
    base.update(fields)
    return TargetSpec(**base)  # type: ignore[arg-type]


def test_takes_in_any_window_never_exceed_burst_plus_rate_times_window(
    buckets: BucketStore,
) -> None:
    bucket = _bucket()
    rng = random.Random(7)
    # 400 takes at random instants over 10 s: four times what the bucket lets through.
    instants = sorted(rng.randrange(0, 10_000) for _ in range(400))
    granted = [t for t in instants if buckets.take(bucket, now_ms=t).allowed]
    assert BURST <= len(granted) <= BURST + RATE * 10 + 1
    for i, start in enumerate(granted):
        for window_ms in (1, 200, 1000, 3000):
            inside = sum(1 for t in granted[i:] if t < start + window_ms)
            assert inside <= BURST + RATE * window_ms / 1000, (start, window_ms, inside)


def test_refused_takes_get_turns_one_token_apart(buckets: BucketStore) -> None:
    bucket = _bucket()
    assert all(buckets.take(bucket, now_ms=0).allowed for _ in range(BURST))
    waits = [buckets.take(bucket, now_ms=0).wait_s for _ in range(5)]
    # Not all at the next token: 0.2 s, 0.4 s, ... (one token apart at 5/s).
    assert waits == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0], abs=0.002)


def test_a_throttle_halves_the_rate_once_per_burst_then_it_recovers(
    buckets: BucketStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.SCHEDULER, "TARGET_COOLDOWN_S", 10.0)
    monkeypatch.setitem(settings.SCHEDULER, "TARGET_RECOVERY_S", 5.0)
    bucket = _bucket(rate=8.0, burst=8)
    assert buckets.take(bucket, now_ms=0).rate == 8.0
    # Three answers of one burst within ADAPT_HOLD_MS: one halving.
    turns = [buckets.penalize(bucket, now_ms=t) for t in (0, 100, 300)]
    assert [turn.rate for turn in turns] == [4.0, 4.0, 4.0]
    # Their turns are spread at the lowered rate, a quarter second apart.
    assert turns[1].wait_s - turns[0].wait_s == pytest.approx(0.25 - 0.1, abs=0.002)
    assert buckets.penalize(bucket, now_ms=1500).rate == 2.0
    assert buckets.take(bucket, now_ms=5000).rate == 2.0  # still cooling down (until 11.5 s)
    assert buckets.take(bucket, now_ms=16_500).rate == pytest.approx(4.0)  # one recovery period
    assert buckets.take(bucket, now_ms=40_000).rate == 8.0  # back, and never above


def test_the_rate_never_drops_below_the_minimum_factor(
    buckets: BucketStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.SCHEDULER, "TARGET_MIN_FACTOR", 0.25)
    bucket = _bucket(rate=8.0)
    rates = [buckets.penalize(bucket, now_ms=t * 2000).rate for t in range(6)]
    assert rates == [4.0, 2.0, 2.0, 2.0, 2.0, 2.0]


def test_retry_after_empties_the_bucket_until_then(buckets: BucketStore) -> None:
    bucket = _bucket()
    turn = buckets.penalize(bucket, retry_after_s=3, now_ms=1000)
    assert turn.wait_s >= 3
    assert not buckets.take(bucket, now_ms=3900).allowed
    refused = buckets.take(bucket, now_ms=3950)
    assert refused.wait_s >= 0.05
    assert buckets.take(bucket, now_ms=4000 + int(turn.wait_s * 1000) + 2000).allowed


@pytest.mark.django_db
def test_a_run_resolves_its_bucket_from_its_group_host_wildcard_or_own_rate() -> None:
    tenant = tenant_factory()
    other = tenant_factory()
    cache = LimitCache(clock=FakeClock(T0), refresh_s=60)
    # No row for the tenant: no bucket, and after the cache's read no query at all.
    assert bucket_for(_spec(), tenant_id=tenant.id, job_id="j", cache=cache) is None
    with CaptureQueriesContext(connection) as queries:
        assert bucket_for(_spec(), tenant_id=tenant.id, job_id="j", cache=cache) is None
    assert len(queries) == 0
    for target, rate in (("api.test", 2.0), ("payments", 3.0), ("*", 9.0)):
        TargetLimit.objects.create(
            tenant=tenant, target=target, rate_per_s=rate, burst=4, created_at=T0, updated_at=T0
        )
    cache.reload()
    host = bucket_for(_spec(), tenant_id=tenant.id, job_id="j", cache=cache)
    assert host == Bucket(f"{tenant.id}:api.test", tenant.id, "api.test", 2.0, 4)
    group = bucket_for(_spec(group="payments"), tenant_id=tenant.id, job_id="j", cache=cache)
    assert group is not None
    assert (group.target, group.rate) == ("payments", 3.0)
    wildcard = bucket_for(
        _spec(url="https://other.test/x"), tenant_id=tenant.id, job_id="j", cache=cache
    )
    assert wildcard is not None
    assert (wildcard.key, wildcard.rate) == (f"{tenant.id}:other.test", 9)
    # A group with no row of its own is unlimited (the wildcard is for hosts only), as is a
    # callable, and another tenant's runs.
    assert bucket_for(_spec(group="nope"), tenant_id=tenant.id, job_id="j", cache=cache) is None
    assert bucket_for(_spec(kind="callable", url=""), tenant_id=tenant.id, job_id="j",
                      cache=cache) is None  # fmt: skip
    assert bucket_for(_spec(), tenant_id=other.id, job_id="j", cache=cache) is None
    own = bucket_for(_spec(rate=0.5, burst=2), tenant_id=tenant.id, job_id="j1", cache=cache)
    assert own == Bucket("job:j1", tenant.id, "api.test", 0.5, 2)


@pytest.mark.django_db
def test_the_status_overview_shows_each_target_its_rate_now_and_its_held_runs(
    buckets: BucketStore,
) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from beat_engine.clock import SystemClock
    from jobs.models import DecisionReason
    from jobs.models_reasons import ReasonKind
    from tests.support.factories import job_factory

    now = SystemClock().now()
    tenant = tenant_factory()
    for target in ("api.test", "quiet.test"):
        TargetLimit.objects.create(
            tenant=tenant, target=target, rate_per_s=4, burst=3, created_at=now, updated_at=now
        )
    buckets.penalize(Bucket(f"{tenant.id}:api.test", tenant.id, "api.test", 4.0, 3))
    job = job_factory(tenant, now=now)
    DecisionReason.objects.create(
        job=job, tenant=tenant, kind=ReasonKind.DEFERRED_TARGET_LIMIT, first_at=now,
        last_at=now, count=7, recorded_at=now, updated_at=now, detail="target api.test: 4/s",
    )  # fmt: skip
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))

    body = client.get(reverse("status:overview")).content.decode()

    panel = body[body.index('id="target-limits"') :]
    panel = " ".join(panel[: panel.index("</div>")].split())
    assert (
        f'<td>{tenant.name}</td><td>api.test</td> <td class="num">4/s / 3</td> '
        '<td class="num"><span class="badge state-retry_wait" title="lowered after a 429/503">'
        '2/s</span></td> <td class="num">7</td>'
    ) in panel, panel
    assert '<td>quiet.test</td> <td class="num">4/s / 3</td> <td class="num">4/s</td> ' in panel
