"""The run state machine as data: states, allowed transitions, and what each state means."""

from __future__ import annotations

from django.db import models


class RunState(models.TextChoices):
    # Waiting for its due time (manual trigger, backfill, catch-up); the engine queues it.
    PENDING = "pending", "Pending"
    # Claimed and handed to the broker; a worker has not started it yet.
    QUEUED = "queued", "Queued"
    # A worker holds it under a lease that it renews with heartbeats.
    RUNNING = "running", "Running"
    # An attempt failed; the engine queues the next attempt at due_at.
    RETRY_WAIT = "retry_wait", "Waiting to retry"
    SUCCEEDED = "succeeded", "Succeeded"
    # Failed with an error that retrying cannot fix (for example HTTP 404); not retried.
    FAILED = "failed", "Failed"
    # Failed on its last allowed attempt; a DeadLetter row holds it for replay.
    DEAD = "dead", "Dead-lettered"
    # Not run because of the concurrency policy (jobs/services/overlap.py); last_error says
    # which run held it back.
    SKIPPED = "skipped", "Skipped"
    # Its firing was later than the job's starting deadline, so it was not run.
    MISSED = "missed", "Missed"
    CANCELLED = "cancelled", "Cancelled"
    # Not run because a parent's run for the same logical time did not succeed (a job with
    # trigger rule all_success); the hand-off creates the run in this state. Replaying the
    # parent to success re-arms it to pending.
    UPSTREAM_FAILED = "upstream_failed", "Upstream failed"


ALLOWED_TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset(
        {RunState.QUEUED, RunState.SKIPPED, RunState.MISSED, RunState.CANCELLED}
    ),
    RunState.QUEUED: frozenset(
        {
            RunState.RUNNING,
            RunState.SKIPPED,
            RunState.CANCELLED,
            RunState.DEAD,
            # Deferred by forbid: a retry held back by another run of its job waits again.
            RunState.RETRY_WAIT,
        }
    ),
    RunState.RUNNING: frozenset(
        {
            RunState.SUCCEEDED,
            RunState.FAILED,
            RunState.RETRY_WAIT,
            RunState.DEAD,
            RunState.CANCELLED,
            # The attempt's lease expired (worker died): a new attempt is queued.
            RunState.QUEUED,
        }
    ),
    RunState.RETRY_WAIT: frozenset({RunState.QUEUED, RunState.CANCELLED}),
    # Replay of a dead or failed run waits as pending; the engine queues the next attempt.
    RunState.DEAD: frozenset({RunState.PENDING}),
    RunState.FAILED: frozenset({RunState.PENDING}),
    RunState.SUCCEEDED: frozenset(),
    RunState.SKIPPED: frozenset(),
    RunState.MISSED: frozenset(),
    RunState.CANCELLED: frozenset(),
    # Re-armed when the parent that failed it is replayed and succeeds.
    RunState.UPSTREAM_FAILED: frozenset({RunState.PENDING}),
}

TERMINAL_STATES: frozenset[RunState] = frozenset(
    {
        RunState.SUCCEEDED,
        RunState.FAILED,
        RunState.DEAD,
        RunState.SKIPPED,
        RunState.MISSED,
        RunState.CANCELLED,
        RunState.UPSTREAM_FAILED,
    }
)
# States a run is only ever created in, never moved into (docs/dags.md, failure propagation).
CREATED_ONLY_STATES: frozenset[RunState] = frozenset({RunState.UPSTREAM_FAILED})
# States whose due_at is a timer the engine fires.
TIMER_STATES: frozenset[RunState] = frozenset({RunState.PENDING, RunState.RETRY_WAIT})
# States in which a run still counts as in flight for the concurrency policy: a run waiting to
# retry is still the job's current run.
IN_FLIGHT_STATES: frozenset[RunState] = frozenset(
    {RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT}
)


def can_transition(current: RunState | str, target: RunState | str) -> bool:
    return RunState(target) in ALLOWED_TRANSITIONS[RunState(current)]


def sources_of(target: RunState) -> frozenset[RunState]:
    """Every state from which ``target`` may be entered, for compare-and-set WHERE clauses."""
    return frozenset(state for state, targets in ALLOWED_TRANSITIONS.items() if target in targets)


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"
    # The worker stopped heartbeating; the engine re-queued the run as a new attempt.
    LOST = "lost", "Lease lost"
    # Refused before running: a critical job's key had already completed.
    DUPLICATE = "duplicate", "Duplicate"
