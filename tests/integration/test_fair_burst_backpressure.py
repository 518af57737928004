"""A burst of one tenant's firings beside another tenant's one, with the broker queue bounded.

The lone tenant's run is claimed and published before the bulk of the crowd's, whatever its
place in the horizon; the broker never holds more than the bound plus one batch; the runs
over the bound wait queued in PostgreSQL and go out, each once, as the queue drains (a
worker's BRPOP is played by RPOP here: the order and counts are the point, not timings); the
sweep neither counts the held runs as lost nor sends them twice; a node that stops while
holding runs leaves them to the next owner, which sends each once. While the burst is claimed,
each of the lone tenant's later firings waits for the one claim running when it fell due, in a
batch of its own; the full horizon reload waits until the burst is claimed; slow claims shrink
the batches to about claim_batch_target_s.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis

from beat_engine import engine as engine_module
from beat_engine.claims import ClaimResult, PreparedClaim
from beat_engine.publisher import PRIORITY_STEPS, queue_key
from jobs.models import Job, JobRun
from jobs.states import RunState
from tests.support.beat_nodes import broker_messages, make_engine, message_args
from tests.support.clock import FakeClock
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BATCH = 10
BOUND = 30
CROWD = 120
LISTS = sorted({queue_key("scheduler", step) for step in PRIORITY_STEPS})


def _depth(client: redis.Redis) -> int:
    return sum(int(client.llen(key)) for key in LISTS)


def _take(client: redis.Redis, count: int) -> list[str]:
    """Take up to ``count`` messages as a worker would (oldest first, from the tail)."""
    taken: list[str] = []
    for key in LISTS:
        while len(taken) < count and (raw := client.rpop(key)) is not None:
            taken.append(str(message_args(json.loads(raw))[0]))
    return taken


def _burst(count: int = CROWD, lone_every: timedelta = timedelta(hours=1)) -> tuple[list[Job], Job]:
    """A crowd tenant's ``count`` hourly jobs and a lone tenant's job (every ``lone_every``,
    anchored at T0), all due at T0 + 1 s."""
    crowd_tenant, lone_tenant = tenant_factory(), tenant_factory()
    crowd = [job_factory(crowd_tenant, interval=timedelta(hours=1)) for _ in range(count)]
    lone = job_factory(lone_tenant, interval=lone_every)
    due = T0 + timedelta(seconds=1)
    Job.objects.filter(id__in=[j.id for j in crowd]).update(next_fire_at=due, partition=1)
    # Loaded last into the horizon (partitions are paged in order), pushed last into the heap.
    Job.objects.filter(id=lone.id).update(next_fire_at=due, partition=63)
    return crowd, lone


def test_the_lone_tenants_run_goes_first_and_the_broker_stays_within_its_bound(
    redis_client: redis.Redis,
) -> None:
    _crowd, lone = _burst()
    clock = FakeClock(T0)
    # A fair window of two batches: the lone run must be in the first batch by the claim
    # order itself, not because one window happened to cover the whole burst.
    engine = make_engine(
        clock, claim_batch=BATCH, fair_window=2 * BATCH, max_claims_per_tick=10_000,
        max_claim_s=60.0, broker_queue_bound=BOUND,
    )  # fmt: skip
    engine.tick()
    clock.advance(timedelta(seconds=2))
    engine.tick()
    assert JobRun.objects.count() == CROWD + 1
    depth = _depth(redis_client)
    assert depth <= BOUND + BATCH
    lone_run = JobRun.objects.get(job=lone)
    first = _take(redis_client, BATCH)
    assert str(lone_run.id) in first
    assert JobRun.objects.filter(state=RunState.QUEUED, published_at__isnull=True).count() >= (
        CROWD + 1 - BOUND - BATCH
    )
    sent: Counter[str] = Counter(first)
    peak = depth
    for _ in range(100):
        clock.advance(timedelta(seconds=0.5))
        engine.tick()
        peak = max(peak, _depth(redis_client))
        taken = _take(redis_client, 2 * BATCH)
        sent.update(taken)
        if not taken and not engine._outbox.held:
            break
    engine.shutdown()
    assert peak <= BOUND + BATCH
    assert sent == Counter({str(run.id): 1 for run in JobRun.objects.all()})
    # Lateness is measured at the real push: the runs held longest say so.
    lateness = sorted(JobRun.objects.values_list("lateness", flat=True))
    assert lateness[0] is not None
    assert lateness[0] <= timedelta(seconds=1)
    assert lateness[-1] >= timedelta(seconds=3)
    assert JobRun.objects.get(job=lone).lateness == lateness[0]


def test_held_runs_are_not_lost_to_the_sweep_nor_sent_twice_across_a_takeover(
    redis_client: redis.Redis,
) -> None:
    _burst()
    clock = FakeClock(T0)
    options = {"claim_batch": BATCH, "max_claim_s": 60.0, "broker_queue_bound": BOUND}
    engine = make_engine(clock, **options)
    engine.tick()
    clock.advance(timedelta(seconds=2))
    engine.tick()
    held = len(engine._outbox.held)
    assert held >= CROWD + 1 - BOUND - BATCH
    # Past the unpublished sweep's cutoff and the republish period: the held runs are old,
    # unpublished and not started, and still none is sent again.
    for _ in range(4):
        clock.advance(timedelta(seconds=25))
        engine.tick()
    assert _depth(redis_client) <= BOUND + BATCH
    assert len(engine._outbox.held) == held
    sent: Counter[str] = Counter(_take(redis_client, BATCH))
    # The node stops while it holds runs: they are queued and unpublished in PostgreSQL, and
    # the next owner's takeover sweep sends them.
    engine.shutdown()
    successor = make_engine(clock, node_id="node-b", **options)
    everything = {str(run.id) for run in JobRun.objects.all()}
    for _ in range(200):
        successor.tick()
        sent.update(_take(redis_client, 2 * BATCH))
        if sent.keys() == everything:
            break
        clock.advance(timedelta(seconds=0.5))
    # A few sweeps more: nothing is sent again.
    for _ in range(3):
        clock.advance(timedelta(seconds=3))
        successor.tick()
        sent.update(_take(redis_client, 2 * BATCH))
    successor.shutdown()
    assert sent == Counter(dict.fromkeys(everything, 1))
    assert len(sent) == CROWD + 1


def test_runs_released_from_the_hold_are_marked_before_the_sweep_looks(
    redis_client: redis.Redis,
) -> None:
    """Held past the unpublished sweep's cutoff, then released in the tick whose sweep runs:
    pushed and not yet marked, they must not look lost to that sweep."""
    tenant = tenant_factory()
    jobs = [job_factory(tenant, interval=timedelta(hours=1)) for _ in range(8)]
    Job.objects.filter(id__in=[j.id for j in jobs]).update(next_fire_at=T0 + timedelta(seconds=1))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=BATCH, max_claim_s=60.0, broker_queue_bound=5)
    engine.tick()
    clock.advance(timedelta(seconds=2))
    engine.tick()
    assert len(engine._outbox.held) == 3
    clock.advance(timedelta(seconds=40))
    sent: Counter[str] = Counter(_take(redis_client, 100))
    engine.tick()
    for _ in range(3):
        sent.update(_take(redis_client, 100))
        clock.advance(timedelta(seconds=3))
        engine.tick()
    sent.update(_take(redis_client, 100))
    engine.shutdown()
    assert sent == Counter({str(run.id): 1 for run in JobRun.objects.all()})
    assert len(sent) == 8


def test_a_lone_tenants_firings_due_while_a_burst_is_claimed_go_into_the_next_batch(
    redis_client: redis.Redis,
) -> None:
    """A burst's window of 200 due entries is claimed one batch of 10 per tick, one second
    per tick; the lone tenant's job falls due every 2 s meanwhile. Each of its firings is
    claimed within two ticks of falling due (the batch in hand, then the next one), and none
    is skipped, while the window is still being claimed: its firings do not wait for the rest
    of the window."""
    crowd, lone = _burst(2 * CROWD, lone_every=timedelta(seconds=2))
    clock = FakeClock(T0)
    engine = make_engine(
        clock, claim_batch=BATCH, fair_window=20 * BATCH, max_claims_per_tick=BATCH,
        max_claim_s=60.0, broker_queue_bound=0,
    )  # fmt: skip
    engine.tick()
    for _ in range(16):
        clock.advance(timedelta(seconds=1))
        engine.tick()
    engine.shutdown()
    # The window was still being claimed when the last lone firing came due.
    crowd_claimed = JobRun.objects.filter(job__in=crowd).count()
    assert crowd_claimed < 20 * BATCH
    lone_runs = list(JobRun.objects.filter(job=lone).order_by("scheduled_for"))
    instants = [(r.scheduled_for - T0).total_seconds() for r in lone_runs]
    # Every firing from the first (1 s) to the one due 14 s after T0, none skipped.
    assert instants[: len(instants)] == [1.0, *range(2, 2 * len(instants), 2)][: len(instants)]
    assert instants[-1] >= 14
    assert all(r.queued_at is not None for r in lone_runs)
    assert [(r.queued_at - r.scheduled_for) <= timedelta(seconds=2) for r in lone_runs] == [
        True
    ] * len(lone_runs)


def test_the_adaptive_bound_keeps_about_one_second_of_the_workers_work_in_the_broker(
    redis_client: redis.Redis,
) -> None:
    """A crowd of 300 runs claimed at once, a fixed bound (1,000) that they fit under, and
    "workers" that take 3 messages per 0.1 s (RPOP, 30 runs/s): the bound follows the drain
    rate, so the broker holds about 30 messages (a second of work), not the crowd, and the
    lone tenant's later firings wait behind about that many messages, each sent once."""
    _crowd, lone = _burst(300, lone_every=timedelta(seconds=2))
    clock = FakeClock(T0)
    engine = make_engine(
        clock, broker_queue_bound=1_000, broker_queue_target_wait_s=1.0,
        broker_queue_min_bound=5, backpressure_poll_s=0.1,
    )  # fmt: skip
    engine.tick()
    taken: list[str] = []
    depths: list[int] = []
    # For each run: the most messages ever ahead of it in the broker (taken before it).
    ahead: dict[str, int] = {}
    for _ in range(120):
        clock.advance(timedelta(seconds=0.1))
        engine.tick()
        waiting = [str(message_args(m)[0]) for m in broker_messages(redis_client)]
        depths.append(len(waiting))
        for position, run_id in enumerate(waiting):
            ahead[run_id] = max(ahead.get(run_id, 0), position)
        taken.extend(_take(redis_client, 3))
    engine.shutdown()
    taken.extend(_take(redis_client, 10_000))
    # The broker never held more than the bound sized from 30 runs/s (plus the rounding of
    # the 0.1 s steps), far below the crowd that fits under the fixed bound.
    assert max(depths) <= 36
    assert len(taken) > 300
    lone_runs = list(JobRun.objects.filter(job=lone).order_by("scheduled_for"))
    instants = [(r.scheduled_for - T0).total_seconds() for r in lone_runs]
    assert instants[:6] == [1.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    # Each lone run waited behind about a second of the workers' work at most, not the crowd.
    assert [ahead[str(r.id)] <= 36 for r in lone_runs[:6]] == [True] * 6
    assert Counter(taken) == Counter({str(run.id): 1 for run in JobRun.objects.all()})


def _slow_claims(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, *, fixed_s: float, per_row_s: float
) -> list[tuple[datetime, frozenset[uuid.UUID]]]:
    """Each claim takes ``fixed_s`` + ``per_row_s`` a row on the test's clock (a loaded host);
    returns, for each claim in order, its start instant and its jobs."""
    claims: list[tuple[datetime, frozenset[uuid.UUID]]] = []
    original = engine_module.commit_claim

    def slow(prepared: PreparedClaim, **kwargs: Any) -> ClaimResult:
        claims.append((clock.now(), frozenset(prepared.batch.partition_of)))
        clock.advance(timedelta(seconds=fixed_s + per_row_s * len(prepared.batch.advance)))
        return original(prepared, **kwargs)

    monkeypatch.setattr(engine_module, "commit_claim", slow)
    return claims


def test_a_lone_tenants_firing_waits_only_for_the_claim_running_when_it_fell_due(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crowd of 400 firings claimed in batches of 10, each claim taking 0.4 s, 0.3 s between
    ticks; the lone tenant's job falls due every second meanwhile, during a claim or between
    two ticks (a batch carried over, prepared). Each of its firings after the first is claimed
    in a batch of its own, before any claim of the crowd that started after it fell due: it
    waits for the claim in hand, not for the next batch of the crowd too. None is skipped."""
    crowd, lone = _burst(400, lone_every=timedelta(seconds=1))
    clock = FakeClock(T0)
    engine = make_engine(clock, claim_batch=BATCH, max_claim_s=1.0, broker_queue_bound=0)
    engine.tick()
    claims = _slow_claims(monkeypatch, clock, fixed_s=0.4, per_row_s=0.0)
    clock.advance(timedelta(seconds=1))
    for _ in range(100):
        engine.tick()
        if JobRun.objects.filter(job__in=crowd).count() == len(crowd):
            break
        clock.advance(timedelta(seconds=0.3))
    engine.shutdown()
    assert JobRun.objects.filter(job__in=crowd).count() == len(crowd)
    burst_end = max(start for start, jobs in claims if jobs - {lone.id})
    lone_runs = [
        r for r in JobRun.objects.filter(job=lone).order_by("scheduled_for")
        if r.scheduled_for < burst_end
    ]  # fmt: skip
    instants = [(r.scheduled_for - T0).total_seconds() for r in lone_runs]
    # The burst's claims lasted more than 16 s: every firing of the lone job meanwhile, none
    # skipped by its catch-up policy.
    assert instants == [float(s) for s in range(1, len(instants) + 1)]
    assert len(instants) >= 16
    # Which claim took each lone firing (they are claimed in order, one a second).
    lone_claims = [i for i, (_start, jobs) in enumerate(claims) if lone.id in jobs]
    assert len(lone_claims) >= len(lone_runs)
    for run, index in zip(lone_runs[1:], lone_claims[1:], strict=False):
        assert claims[index][1] == {lone.id}
        crowd_after = [
            i for i, (start, jobs) in enumerate(claims)
            if start >= run.scheduled_for and jobs - {lone.id}
        ]  # fmt: skip
        assert crowd_after == [] or index < crowd_after[0]


def test_the_full_horizon_reload_waits_while_a_burst_is_claimed_between_its_windows_too(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of 120 claimed one batch of 10 a tick, in windows of 20, the full reload due
    every second: none runs until the burst is claimed (it would reload the burst's unclaimed
    rest, a stall of seconds at 200,000), not even when a window is used up and the next one
    not yet taken; a tick after the burst reloads."""
    crowd, _lone = _burst()
    clock = FakeClock(T0)
    engine = make_engine(
        clock, claim_batch=BATCH, fair_window=2 * BATCH, max_claims_per_tick=BATCH,
        max_claim_s=60.0, broker_queue_bound=0, refresh_s=1.0, full_refresh_s=1.0,
    )  # fmt: skip
    engine.tick()
    full_reloads: list[int] = []
    original = engine_module.load_horizon

    def recorded(parts: Any, **kwargs: Any) -> Any:
        parts = list(parts)
        after = kwargs.get("after")
        # A partition missing from ``after`` is reloaded whole (beat_engine/reload_turns.py:
        # with full_refresh_s = refresh_s, every partition at every refresh).
        if after is None or any(p not in after for p in parts):
            full_reloads.append(JobRun.objects.filter(job__in=crowd).count())
        return original(parts, **kwargs)

    monkeypatch.setattr(engine_module, "load_horizon", recorded)
    for _ in range(20):
        clock.advance(timedelta(seconds=1))
        engine.tick()
    engine.shutdown()
    assert JobRun.objects.filter(job__in=crowd).count() == CROWD
    # Reloads before the burst's first claim (its instant's tick) and once it was all claimed,
    # never in between.
    assert CROWD in full_reloads
    assert set(full_reloads) <= {0, CROWD}


def test_slow_claims_shrink_the_batches_to_the_target_time(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims taking 10 ms a row on the test's clock: the first two batches hold 100 rows (the
    second is cut while the first, not yet measured, is claimed), the next ones 25 rows, 0.25 s
    of claim each, down to the tail; every firing is claimed once."""
    crowd, _lone = _burst(300)
    clock = FakeClock(T0)
    engine = make_engine(
        clock, claim_batch=100, claim_batch_min=10, claim_batch_target_s=0.25,
        broker_queue_bound=0,
    )  # fmt: skip
    engine.tick()
    claims = _slow_claims(monkeypatch, clock, fixed_s=0.0, per_row_s=0.01)
    clock.advance(timedelta(seconds=1))
    for _ in range(20):
        engine.tick()
    engine.shutdown()
    sizes = [len(jobs) for _start, jobs in claims]
    assert sizes[:2] == [100, 100]
    assert sizes[2:-1] == [25] * 4
    assert sum(sizes) == JobRun.objects.count() == len(crowd) + 1
