"""Dead letters: announcing them on the dead-letter queue, selecting them, replaying them."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from kombu import Exchange, Queue

from jobs import metrics
from jobs.models import DeadLetter, JobRun
from jobs.notify import notify_timers_due
from jobs.services.runs import run_transition
from jobs.states import RunState

logger = logging.getLogger(__name__)

DEAD_LETTER_TASK = "jobs.dead_letter"


def dead_letter_queue() -> Queue:
    name = settings.SCHEDULER["DEAD_LETTER_QUEUE"]
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def dead_letter_announce(
    *,
    run_id: uuid.UUID,
    job_id: uuid.UUID,
    attempts: int,
    error: str,
    now: datetime,
    connection: Any = None,
) -> None:
    """Publish a notice to the dead-letter queue; the DeadLetter row is the durable record.

    Nothing may consume that queue, so the queue is declared on every publish: the Redis
    transport silently drops a message routed to an exchange without a binding. With
    ``connection`` (a kombu connection) the notice goes through it, not the app's pool: the
    beat engine sends notices from a thread of its own, with short socket timeouts.
    """
    from scheduler_project.celery import app

    queue = dead_letter_queue()
    try:
        app.send_task(
            DEAD_LETTER_TASK,
            args=[str(run_id), str(job_id), attempts, error[:1000], now.isoformat()],
            queue=queue,  # type: ignore[arg-type]  # kombu accepts a Queue here
            declare=[queue],
            ignore_result=True,
            connection=connection,
        )
    except Exception:  # boundary: a broker outage loses the notice, never the DeadLetter row
        logger.exception("execution.dead_letter.announce_failed", extra={"run_id": str(run_id)})
        metrics.DEAD_LETTER_ANNOUNCE_ERRORS.inc()


def dead_letter_select(
    *,
    job_id: uuid.UUID | None = None,
    tenant_name: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> QuerySet[DeadLetter]:
    """Dead letters whose run is still dead (not replayed since), oldest first."""
    query = DeadLetter.objects.select_related("run", "tenant").filter(run__state=RunState.DEAD)
    if job_id is not None:
        query = query.filter(job_id=job_id)
    if tenant_name is not None:
        query = query.filter(tenant__name=tenant_name)
    if since is not None:
        query = query.filter(moved_at__gte=since)
    query = query.order_by("moved_at", "id")
    return query[:limit] if limit is not None else query


@transaction.atomic
def dead_letter_replay(*, run_id: uuid.UUID, now: datetime) -> bool:
    """Run a dead or failed run again: it waits as pending, due now, and the engine queues it
    as attempt + 1 (a replay grants one more attempt). False when the run is not dead/failed.
    """
    replayed = run_transition(
        run_id=run_id,
        to=RunState.PENDING,
        from_states=[RunState.DEAD, RunState.FAILED],
        due_at=now,
        cancel_requested=False,
        lease_until=None,
        finished_at=None,
        replayed_count=F("replayed_count") + 1,
    )
    if not replayed:
        return False
    DeadLetter.objects.filter(run_id=run_id).update(
        replayed_at=now, replay_count=F("replay_count") + 1
    )
    run = JobRun.objects.values("job_id", "partition").get(id=run_id)
    # Wake the partition owner so the replay does not wait for its next timer poll.
    notify_timers_due([run["partition"]])
    metrics.DEAD_LETTER_REPLAYS.inc()
    return True
