"""The soak's window: the fault plan, random cancels, broker samples, then the drain."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import redis

from beat_engine.priority_order import BROKER_STEPS
from bench.soak.accounting import WorkerKill
from bench.soak.cancels import Canceller
from bench.soak.cluster import Cluster
from bench.soak.plan import Action, FaultKind
from bench.soak.profiles import Profile

TICK_S = 0.2
SAMPLE_EVERY_S = 5.0
# Our queue and its priority lists (kombu's Redis transport keeps one list per priority step).
QUEUE_KEYS = ("scheduler", *(f"scheduler\x06\x16{step}" for step in BROKER_STEPS if step))
NOT_DONE = ("pending", "queued", "running", "retry_wait")


@dataclass
class Sample:
    at_s: float
    broker_messages: int
    queued_runs: int
    redis_used_mib: float


@dataclass
class Observed:
    faults: Counter[str] = field(default_factory=Counter)
    kills: list[WorkerKill] = field(default_factory=list)
    unexpected_exits: Counter[str] = field(default_factory=Counter)
    samples: list[Sample] = field(default_factory=list)
    # (epoch seconds, what happened): the faults as run, for reading the logs afterwards.
    events: list[tuple[float, str]] = field(default_factory=list)
    # (kind, down at, back at) in epoch seconds, for lateness by cause.
    outages: list[tuple[str, float, float]] = field(default_factory=list)
    _down: dict[tuple[str, int], float] = field(default_factory=dict)
    drained_s: float | None = None  # None: runs were still unfinished at the drain's end
    unfinished_after_drain: int = 0


def _do(
    cluster: Cluster, action: Action, observed: Observed, canceller: Canceller | None = None
) -> None:
    what = f"{action.kind} {action.target} {'up' if action.up else 'down'}"
    observed.events.append((time.time(), what))
    victim = (str(action.kind), action.target)
    if action.up and victim in observed._down:
        observed.outages.append((victim[0], observed._down.pop(victim), time.time()))
    elif not action.up:
        observed._down[victim] = time.time()
    if action.kind == FaultKind.REDIS_RESTART:
        if action.up:
            cluster.redis_up()
        else:
            cluster.redis_down()
            observed.faults[action.kind] += 1
        return
    managed = (cluster.beats if action.kind == FaultKind.BEAT_KILL else cluster.pools)[
        action.target
    ]
    if action.up:
        if action.kind == FaultKind.BEAT_KILL:
            cluster.start_beat(action.target)
        else:
            cluster.start_worker(action.target)
        return
    if action.kind == FaultKind.WORKER_KILL and canceller is not None:
        note = canceller.before_worker_kill(cluster.pids(managed))
        observed.events.append((time.time(), f"before the kill: {note}"))
    pids = cluster.kill(managed)
    observed.faults[action.kind] += 1
    if action.kind == FaultKind.WORKER_KILL:
        observed.kills.append(WorkerKill(time.time(), pids))
        observed.events.append((time.time(), f"killed pids {sorted(pids)}"))


def _restart_exited(cluster: Cluster, observed: Observed) -> None:
    """A process that ended on its own is a finding; it is restarted so the soak goes on."""
    for group, start in (
        (cluster.beats, cluster.start_beat),
        (cluster.pools, cluster.start_worker),
    ):
        for index, managed in enumerate(group):
            code = managed.exited()
            if code is not None:
                observed.unexpected_exits[f"{managed.name} (code {code})"] += 1
                observed.events.append((time.time(), f"{managed.name} exited {code}; restarted"))
                start(index)


def _sample(cluster: Cluster, tenant_id: int, at_s: float) -> Sample | None:
    from jobs.models import JobRun

    client = redis.Redis(unix_socket_path=str(cluster.services.redis.socket_path))
    try:
        pipe = client.pipeline(transaction=False)
        for key in QUEUE_KEYS:
            pipe.llen(key)
        messages = int(sum(pipe.execute()))
        used = float(client.info("memory")["used_memory"]) / 2**20
    except redis.RedisError:
        return None  # Redis is down for a planned restart
    finally:
        client.close()
    queued = JobRun.objects.filter(tenant_id=tenant_id, state="queued").count()
    return Sample(round(at_s, 1), messages, queued, round(used, 1))


def run_window(
    cluster: Cluster,
    profile: Profile,
    plan: list[Action],
    canceller: Canceller,
    *,
    start_epoch: float,
    tenant_id: int,
) -> Observed:
    """From the first firing to the window's end: every action at its time, cancels between."""
    observed = Observed()
    pending = list(plan)
    next_cancel = profile.warmup_s
    next_job_cancel = profile.warmup_s + profile.job_cancel_every_s / 2
    next_sample = 0.0
    while True:
        at = time.time() - start_epoch
        if at >= profile.window_s:
            break
        while pending and pending[0].at_s <= at:
            _do(cluster, pending.pop(0), observed, canceller)
        _restart_exited(cluster, observed)
        if at >= next_cancel:
            canceller.cancel_run()
            next_cancel += profile.cancel_every_s
        if at >= next_job_cancel:
            canceller.cancel_job()
            next_job_cancel += profile.job_cancel_every_s
        if at >= next_sample:
            sample = _sample(cluster, tenant_id, at)
            if sample is not None:
                observed.samples.append(sample)
            next_sample += SAMPLE_EVERY_S
        time.sleep(TICK_S)
    for action in pending:  # the plan ends before the window does; this is a safety net
        _do(cluster, action, observed)
    return observed


def drain(
    cluster: Cluster, profile: Profile, observed: Observed, *, tenant_id: int, cut: datetime
) -> None:
    """Wait, without faults, until every run of the window is finished or the drain is over."""
    from jobs.models import JobRun

    began = time.monotonic()
    left = 0
    while time.monotonic() - began < profile.drain_s:
        _restart_exited(cluster, observed)
        left = JobRun.objects.filter(
            tenant_id=tenant_id, state__in=NOT_DONE, scheduled_for__lte=cut
        ).count()
        if left == 0:
            observed.drained_s = round(time.monotonic() - began, 1)
            return
        time.sleep(2.0)
    observed.unfinished_after_drain = left
