"""Worker side of a run: CAS to running, heartbeat, timeout, call the target, record the outcome."""

from __future__ import annotations

import enum
import logging
import os
import random
import socket
import threading
import uuid
from datetime import datetime

from celery import states
from django.conf import settings
from django.db import close_old_connections, connection

from beat_engine.backoff import retry_delay
from beat_engine.clock import Clock
from jobs import cancel_watch, metrics, result_writer, worker_shutdown
from jobs.db_failover import connection_lost, drop_connection, retry_on_failover
from jobs.models import TargetKind
from jobs.outcomes import Disposition, ResultKind, TargetResult, disposition_for
from jobs.services import run_results, runs, starts, target_waits
from jobs.services.starts import StartedRun
from jobs.states import AttemptOutcome, RunState
from jobs.target_limits import bucket_for
from jobs.target_threads import abandon_target, run_target
from jobs.targets import RunContext, job_timeout_s, prepare_invocation
from jobs.worker_pools import release_task_connection

logger = logging.getLogger(__name__)

# A run delivered before its due instant is started again at it, up to this many times, each
# wait at most this long: the push comes at the instant by the engine's reading of the database
# clock, a few milliseconds from this worker's.
_EARLY_TRIES = 3
_EARLY_WAIT_MAX_S = 1.0

_rng = random.SystemRandom()


class ExecutionOutcome(enum.Enum):
    STALE = "stale"
    SKIPPED = "skipped"
    # Held back by forbid after earlier attempts: waiting to retry again (jobs/services/overlap.py).
    DEFERRED = "deferred"
    SUCCEEDED = "succeeded"
    DUPLICATE = "duplicate"
    RETRY_WAIT = "retry_wait"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    # The outcome write updated zero rows: this attempt had been superseded (a zombie).
    REFUSED = "refused"
    # Its tenant's or job's running limit was reached: parked until a slot frees, no attempt
    # spent (jobs/services/running_limits.py).
    LIMITED = "limited"
    # Held back by its target's rate limit, or answered 429/503: waiting in retry_wait for its
    # turn, no attempt spent (jobs/services/target_waits.py).
    HELD = "held"


_HELD = {
    target_waits.Held.WAITING: ExecutionOutcome.HELD,
    target_waits.Held.CANCELLED: ExecutionOutcome.CANCELLED,
    target_waits.Held.STALE: ExecutionOutcome.STALE,
}


# The host name once per process (a forked pool child has its own id): formatting it for every
# run was 0.6% of a worker's CPU under py-spy.
_worker_names: dict[int, str] = {}


def worker_name() -> str:
    pid = os.getpid()
    name = _worker_names.get(pid)
    if name is None:
        name = _worker_names[pid] = f"{socket.gethostname()}:{pid}"
    return name


def _supervise(
    run: StartedRun, context: RunContext, clock: Clock, wake: threading.Event
) -> TargetResult:
    """Run the target on a target thread; heartbeat the lease and watch for timeout and cancel.

    The wait on the target's result is the heartbeat loop: a run that ends before its first
    heartbeat is due writes none. When the supervisor stops the target, the result says why
    (TIMEOUT, CANCELLED or LOST). A target that does not return within CANCEL_GRACE_S after
    being told to stop is abandoned: its thread keeps running, but its attempt is ended, and
    any write it makes through ``record_key`` is fenced out (it is no longer the running
    attempt).
    """
    conf = settings.SCHEDULER
    invoke, abort = prepare_invocation(run.target, context)
    # ``wake`` is set when the target returns, and when a cancel of this run is announced: the
    # supervisor then heartbeats at once instead of at its next beat (cancel is final,
    # docs/architecture.md, Invariants: a running attempt is asked to stop at once and at every
    # heartbeat).
    returned = threading.Event()

    def invoke_then_wake() -> TargetResult:
        try:
            return invoke()
        finally:
            returned.set()
            wake.set()

    heartbeat_s = float(conf["HEARTBEAT_S"])
    deadline = clock.monotonic() + job_timeout_s(run.target)
    next_beat = clock.monotonic() + heartbeat_s
    stopped: ResultKind | None = None
    target = run_target(invoke_then_wake)
    while not target.done.is_set():
        timeout = max(0.0, min(next_beat, deadline) - clock.monotonic())
        if returned.is_set():
            # Returned: its thread is storing the result; wait for that, still on the beat.
            target.done.wait(timeout)
        else:
            wake.wait(timeout)
        announced = wake.is_set() and not returned.is_set()
        wake.clear()
        if target.done.is_set():
            break
        stopped = _cut_short(clock, deadline)
        if stopped is not None:
            break
        if announced or clock.monotonic() >= next_beat:
            next_beat = clock.monotonic() + heartbeat_s
            stopped = _heartbeat(run, clock)
            if stopped is not None:
                break
    if stopped is None:
        assert target.result is not None
        return target.result
    context.cancelled.set()
    abort()
    if not target.done.wait(float(conf["CANCEL_GRACE_S"])):
        # Counted until it returns: past MAX_ABANDONED_TARGETS the process is retired after
        # this run (jobs/worker_recycle.py), which is what bounds abandoned threads.
        held = abandon_target(target)
        logger.warning(
            "execution.target.abandoned",
            extra={"run_id": str(run.id), "attempt": run.attempt, "abandoned_targets": held},
        )
        metrics.ABANDONED_TARGETS.inc()
    # Whatever the target returns after being told to stop, the stop reason is the outcome:
    # a cooperative target returns early precisely because its work was cut short.
    return TargetResult(stopped, error=_stop_message(stopped, run))


def _cut_short(clock: Clock, deadline: float) -> ResultKind | None:
    """Why the attempt must stop before its next heartbeat, if it must: its job's timeout, or
    a stopping worker that cannot wait for it (ended now rather than left running until its
    lease expires, jobs/worker_shutdown.py)."""
    if clock.monotonic() >= deadline:
        return ResultKind.TIMEOUT
    if worker_shutdown.stopping():
        return ResultKind.INTERRUPTED
    return None


def _heartbeat(run: StartedRun, clock: Clock) -> ResultKind | None:
    try:
        beat = runs.run_heartbeat(run_id=run.id, attempt=run.attempt, now=clock.now())
    except Exception as exc:  # boundary of the heartbeat loop: log, count, keep heartbeating
        logger.exception("execution.heartbeat.failed", extra={"run_id": str(run.id)})
        metrics.HEARTBEAT_ERRORS.inc()
        if connection_lost(exc):
            # Or every later heartbeat fails on the dead connection too, and the run's lease
            # lapses while its target still runs: the next one connects to the new primary.
            drop_connection()
        return None
    finally:
        # Under gevent, back to the pool until the next beat: an attempt that outlives a
        # heartbeat must not hold a connection for the rest of its target (jobs/worker_pools.py).
        release_task_connection()
    if not beat.alive:
        logger.warning(
            "execution.lease.lost", extra={"run_id": str(run.id), "attempt": run.attempt}
        )
        return ResultKind.LOST
    return ResultKind.CANCELLED if beat.cancel_requested else None


def _stop_message(stopped: ResultKind, run: StartedRun) -> str:
    if stopped == ResultKind.TIMEOUT:
        return f"timed out after {run.target.timeout.total_seconds():g}s"
    if stopped == ResultKind.CANCELLED:
        return "cancelled on request"
    if stopped == ResultKind.INTERRUPTED:
        return f"attempt {run.attempt} interrupted: the worker stopped before it finished"
    return "attempt superseded: lease lost"


def run_delivery(run_id: object, attempt: object, *, clock: Clock) -> str:
    """One message of the executor task (jobs/tasks.py), as it arrived: the outcome's value."""
    try:
        parsed = uuid.UUID(str(run_id))
        attempt_no = int(attempt)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        # A malformed message can never succeed; retrying it would only loop.
        logger.error("execution.message.malformed", extra={"run_id": run_id, "attempt": attempt})
        metrics.MALFORMED_MESSAGES.inc()
        return "malformed"
    # Connections outlive tasks (CELERY_DB_REUSE_MAX): as Django does per request, drop one
    # that saw an error or is older than CONN_MAX_AGE.
    close_old_connections()
    # But no CONN_HEALTH_CHECKS probe (a SELECT 1, a round trip per run): the first statement
    # is the start, which is repeated on a new connection when this one turns out lost
    # (jobs/db_failover.py), which is all the probe would have found first. The start is a
    # compare-and-set, so a repeat of a try that had committed changes nothing.
    connection.health_check_done = True  # type: ignore[attr-defined]  # Django 4.1+, not in the stubs
    try:
        return run_execute(run_id=parsed, attempt=attempt_no, clock=clock).value
    finally:
        release_task_connection()


def run_execute(
    *, run_id: uuid.UUID, attempt: int, clock: Clock, worker: str | None = None
) -> ExecutionOutcome:
    """Execute one delivery of (run, attempt); safe to call for duplicates and stale messages.

    ``clock`` must follow the database's clock (jobs/tasks.py passes a DatabaseClock): the
    leases and the retry due time written here are judged by the reaper and the timers on it
    (one clock, docs/architecture.md, Invariants).
    """
    wake = threading.Event()
    # Watched from before the start, so a cancel announced as it starts is not missed, nor a
    # stop of the worker (jobs/worker_shutdown.py).
    with cancel_watch.watching(run_id, wake), worker_shutdown.attempt(wake):
        return _execute(run_id=run_id, attempt=attempt, clock=clock, worker=worker, wake=wake)


def _start(
    run_id: uuid.UUID, attempt: int, worker_id: str, clock: Clock, wake: threading.Event
) -> tuple[starts.StartResult, datetime]:
    """The start's outcome and the instant it was made at."""
    started_at = clock.now()
    started = retry_on_failover(
        starts.run_start, run_id=run_id, attempt=attempt, worker=worker_id, now=started_at
    )
    for _ in range(_EARLY_TRIES):
        if started.outcome != starts.StartOutcome.EARLY or started.not_before is None:
            break
        # Pushed at its instant by a clock a little ahead of this one: started at the instant
        # by this worker's reading of the database clock, never before it.
        wake.wait(min((started.not_before - clock.now()).total_seconds(), _EARLY_WAIT_MAX_S))
        started_at = clock.now()
        started = retry_on_failover(
            starts.run_start, run_id=run_id, attempt=attempt, worker=worker_id, now=started_at
        )
    return started, started_at


def _execute(
    *, run_id: uuid.UUID, attempt: int, clock: Clock, worker: str | None, wake: threading.Event
) -> ExecutionOutcome:
    worker_id = worker or worker_name()
    # Repeated on a new connection while the primary is lost (jobs/db_failover.py): the start
    # is a compare-and-set queued -> running at this attempt, so when the lost try had
    # committed, the repeat finds the run already running and drops this delivery as stale;
    # the target is not run, and the reaper queues the next attempt once the lease lapses.
    started, started_at = _start(run_id, attempt, worker_id, clock, wake)
    if started.outcome in (starts.StartOutcome.STALE, starts.StartOutcome.EARLY):
        # At-least-once delivery: a redelivered or superseded message finds nothing to flip.
        logger.info(
            "execution.delivery.duplicate", extra={"run_id": str(run_id), "attempt": attempt}
        )
        metrics.DUPLICATE_DELIVERIES.inc()
        return ExecutionOutcome.STALE
    if started.outcome == starts.StartOutcome.SKIPPED:
        metrics.RUNS_SKIPPED.labels(reason=started.policy).inc()
        return ExecutionOutcome.SKIPPED
    if started.outcome == starts.StartOutcome.DEFERRED:
        metrics.RUNS_DEFERRED.labels(reason=started.policy).inc()
        return ExecutionOutcome.DEFERRED
    if started.outcome == starts.StartOutcome.HELD:
        # Counted where it parked (scheduler_runs_held_total).
        return ExecutionOutcome.LIMITED
    run = started.run
    assert run is not None
    # A target with no limit costs one dict lookup here, no Redis round trip.
    bucket = None if run.key_done else bucket_for(run.target, tenant_id=run.tenant_id,
                                                  job_id=run.job_id)  # fmt: skip
    if bucket is not None:
        held = target_waits.hold_if_over(run, bucket, now=clock.now())
        if held is not None:
            return _HELD[held]
    metrics.START_LAG.labels(queue=run.queue).observe(run.start_lag_s)
    if run.key_done:
        # No duplicate effect (docs/architecture.md, Invariants): this firing's key already
        # completed, so its effect must not happen again.
        # The start statement looked the key up, for critical jobs only.
        metrics.DEDUP_HITS.labels(source="executor").inc()
        result = TargetResult(ResultKind.DUPLICATE, error="key already completed")
    else:
        context = RunContext(
            job_id=run.job_id,
            run_id=run.id,
            tenant_id=run.tenant_id,
            scheduled_for=run.scheduled_for,
            attempt=attempt,
            idempotency_key=run.dedup_key,
            payload=run.payload,
            now=clock.now(),
        )
        # Under gevent the connection goes back to the process's pool while the target runs
        # (each heartbeat borrows one): a hundred greenlets waiting on slow HTTP targets need
        # a few connections, not a hundred (jobs/worker_pools.py).
        release_task_connection()
        began = clock.monotonic()
        result = _supervise(run, context, clock, wake)
        metrics.RUN_DURATION.labels(target_kind=run.target.kind).observe(clock.monotonic() - began)
    finished_at = clock.now()
    if bucket is not None and target_waits.is_throttle(result):
        # The target asks for less traffic: its rate is lowered and this run waits its turn
        # again, not counted as a failure (up to TARGET_THROTTLE_WAITS times per firing).
        held = target_waits.hold_throttled(run, bucket, result, now=finished_at)
        if held is not None:
            return _HELD[held]
    final = _record(run, result, finished_at)
    # After the outcome's commit, and written by another thread: the stored copy can neither
    # delay nor fail the outcome (jobs/result_writer.py says why losing one is safe).
    result_writer.submit(
        run_results.AttemptResult(
            run_id=run.id,
            attempt=run.attempt,
            job_id=run.job_id,
            target=run.target.url if run.target.kind == TargetKind.HTTP else run.target.name,
            status=_result_status(final, result),
            result=result.result,
            error=result.error,
            traceback=result.traceback,
            worker=worker_id,
            started_at=started_at,
            finished_at=finished_at,
            accepted=final != ExecutionOutcome.REFUSED,
        )
    )
    return final


def _result_status(final: ExecutionOutcome, result: TargetResult) -> str:
    """The attempt's Celery state in its stored result (jobs/services/run_results.py)."""
    if final == ExecutionOutcome.REFUSED:
        # Superseded: the state says what the target did; the result's meta says it was refused.
        ran = result.kind in (ResultKind.SUCCESS, ResultKind.DUPLICATE)
        return states.SUCCESS if ran else states.FAILURE
    if final in (ExecutionOutcome.SUCCEEDED, ExecutionOutcome.DUPLICATE):
        return states.SUCCESS
    return states.REVOKED if final == ExecutionOutcome.CANCELLED else states.FAILURE


_ATTEMPT_OUTCOMES = {
    ResultKind.TIMEOUT: AttemptOutcome.TIMED_OUT,
    ResultKind.DUPLICATE: AttemptOutcome.DUPLICATE,
    ResultKind.SUCCESS: AttemptOutcome.SUCCEEDED,
    # What the reaper writes for an attempt whose worker went away; this one said so itself.
    ResultKind.INTERRUPTED: AttemptOutcome.LOST,
}


def _record(run: StartedRun, result: TargetResult, now: datetime) -> ExecutionOutcome:
    disposition = disposition_for(result.kind, attempt=run.attempt, policy=run.retry)
    outcome = _ATTEMPT_OUTCOMES.get(result.kind, AttemptOutcome.FAILED)
    # True or the state the run ended in when accepted; False or None when refused.
    accepted: bool | RunState | None
    if disposition == Disposition.SUCCEED:
        accepted = runs.run_succeed(
            run_id=run.id,
            release_slot=run.limited,
            attempt=run.attempt,
            now=now,
            result=result.result,
            outcome=outcome,
            # Only a critical job's start reads the key (no duplicate effect,
            # docs/architecture.md, Invariants), so only its success records one: a key per
            # success of every job was an insert nothing read (docs/history.md). A callable that
            # recorded its own key did so with its effect; ON CONFLICT makes a second record
            # harmless, but a duplicate already has one.
            record_key=run.critical and result.kind != ResultKind.DUPLICATE,
        )
        final = (
            ExecutionOutcome.DUPLICATE
            if result.kind == ResultKind.DUPLICATE
            else ExecutionOutcome.SUCCEEDED
        )
    elif disposition == Disposition.CANCEL:
        accepted = runs.run_cancelled(
            run_id=run.id, attempt=run.attempt, now=now, error=result.error,
            release_slot=run.limited,
        )  # fmt: skip
        final = ExecutionOutcome.CANCELLED
    elif disposition == Disposition.FAIL:
        accepted = runs.run_fail(
            run_id=run.id,
            release_slot=run.limited,
            attempt=run.attempt,
            now=now,
            error=result.error,
            outcome=outcome,
            result=result.result,
        )
        final = ExecutionOutcome.FAILED
    elif disposition == Disposition.RETRY:
        # A wait the target asked for (HTTP Retry-After) is a floor under the backoff. An
        # attempt cut short by a stopping worker is not the target's failure: like the reaper's
        # re-queue, the next attempt is due at once.
        due_at = (
            now
            if result.kind == ResultKind.INTERRUPTED
            else now + retry_delay(run.attempt, run.retry, _rng, not_before=result.retry_after)
        )
        accepted = runs.run_retry(
            run_id=run.id,
            release_slot=run.limited,
            attempt=run.attempt,
            now=now,
            due_at=due_at,
            error=result.error,
            outcome=outcome,
            result=result.result,
        )
        final = ExecutionOutcome.RETRY_WAIT
    else:
        accepted = runs.run_dead_letter(
            run_id=run.id,
            release_slot=run.limited,
            attempt=run.attempt,
            now=now,
            error=result.error,
            outcome=outcome,
            result=result.result,
        )
        final = ExecutionOutcome.DEAD
    if accepted == RunState.CANCELLED:
        # The run's cancel was requested while this attempt ran: a failure ends it cancelled
        # rather than retried or dead-lettered (cancel is final, docs/architecture.md,
        # Invariants).
        final = ExecutionOutcome.CANCELLED
    if not accepted:
        # No stale fence (docs/architecture.md, Invariants): a superseded attempt's late
        # completion changes nothing.
        logger.warning(
            "execution.completion.refused",
            extra={"run_id": str(run.id), "attempt": run.attempt, "outcome": final.value},
        )
        metrics.STALE_COMPLETIONS.inc()
        return ExecutionOutcome.REFUSED
    metrics.RUNS_FINISHED.labels(outcome=final.value).inc()
    if final == ExecutionOutcome.RETRY_WAIT:
        metrics.RETRIES.labels(target_kind=run.target.kind).inc()
    elif final == ExecutionOutcome.DEAD:
        metrics.DEAD_LETTERS.inc()
    return final
