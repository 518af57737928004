"""The concurrency policy as a decision: may this run start, given the job's other runs?

Pure: the caller reads the job's other in-flight runs with the job row locked and applies the
verdict with compare-and-set statements (jobs/services/starts.py). Runs of one job are ordered
by their firing instant, ``scheduled_for``, which the unique key makes distinct.

forbid: no two runs of the job execute at once, and the earliest firing goes first.
    A run does not start while another run of the job is running, or while an earlier one is
    queued or waiting to retry. A run that never started an attempt is then skipped; one that
    already has attempts behind it (a retry, a re-queue after a lost lease, a replay) is
    deferred, never skipped, so its error and its attempt budget are kept.
replace: the newest firing wins.
    A run does not start while a newer run of the job is queued, running or waiting to retry:
    it is skipped as superseded. A run that starts replaces every older in-flight run: a
    running one is asked to stop, a queued or retry-waiting one is cancelled. An older run
    never stops a newer one.
allow: runs overlap freely.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from jobs.models import ConcurrencyPolicy
from jobs.states import RunState


class Verdict(enum.Enum):
    START = "start"
    # Never started an attempt: recorded as skipped, with the run that blocked it.
    SKIP = "skip"
    # Has attempts behind it: back to retry_wait for a while, its error and budget untouched.
    DEFER = "defer"


@dataclass(frozen=True)
class Sibling:
    """Another in-flight run of the same job."""

    id: uuid.UUID
    state: RunState
    scheduled_for: datetime


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    # The run that keeps this one from starting (SKIP, DEFER).
    blocker: Sibling | None = None
    # Older runs this one replaces once it has started (replace only).
    replaces: tuple[Sibling, ...] = ()


def decide(
    policy: str, *, scheduled_for: datetime, attempt: int, others: Iterable[Sibling]
) -> Decision:
    """What the policy says about starting ``attempt`` of the run firing at ``scheduled_for``.

    ``others`` are the job's other runs that are queued, running or waiting to retry.
    """
    siblings = sorted(others, key=lambda s: s.scheduled_for)
    held_back = Verdict.SKIP if attempt <= 1 else Verdict.DEFER
    if policy == ConcurrencyPolicy.FORBID:
        running = [s for s in siblings if s.state == RunState.RUNNING]
        earlier = [s for s in siblings if s.scheduled_for < scheduled_for]
        blockers = running or earlier
        return Decision(held_back, blockers[0]) if blockers else Decision(Verdict.START)
    if policy == ConcurrencyPolicy.REPLACE:
        newer = [s for s in siblings if s.scheduled_for > scheduled_for]
        if newer:
            # Superseded: the newest firing wins, so even a retry of an older one gives way.
            return Decision(Verdict.SKIP, newer[-1])
        return Decision(Verdict.START, replaces=tuple(siblings))
    return Decision(Verdict.START)


def skip_reason(policy: str, blocker: Sibling) -> str:
    """The reason a skipped run records: which run held it back, and how."""
    firing = f"run {blocker.id} (firing {blocker.scheduled_for.isoformat()})"
    state = RunState(blocker.state).value
    if policy == ConcurrencyPolicy.REPLACE:
        return f"skipped: superseded by the newer {firing}, which is {state} (replace)"
    return f"skipped: {firing} of this job is still {state} (forbid)"


def replaced_reason(by: uuid.UUID) -> str:
    return f"replaced by the newer run {by} (replace)"
