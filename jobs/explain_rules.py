"""Why did (or didn't) a job fire at an instant: the decision, from facts already read.

Pure: no database, no clock. jobs.services.explain reads the facts (the run at the instant,
the job's recorded changes, the engine's recorded reasons) and passes ``now``; this module
only decides which reason of the catalogue (docs/operations.md, "Reasons") applies and words
it. Order matters where several facts hold: a firing missed while the job was paused is
explained by the pause (the catch-up that recorded it on resume is evidence); a late run held
back by its tenant's limit is explained by the limit, not by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from beat_engine.schedules import ScheduleSpec, last_fires, next_fire_after

_MICROSECOND = timedelta(microseconds=1)
# How far back the firing before an instant is looked for, widening: a yearly cron needs a
# year, `0 0 29 2 *` up to eight.
_LOOKBACK = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=32),
    timedelta(days=400),
    timedelta(days=8 * 366),
)


class Verdict(StrEnum):
    FIRED = "fired"
    ENGINE_LATE = "engine_late"
    PAUSED = "paused"
    MISSED_CATCH_UP = "missed_catch_up"
    SKIPPED_CONCURRENCY = "skipped_concurrency"
    DEFERRED_TENANT_LIMIT = "deferred_tenant_limit"
    DEFERRED_TARGET_LIMIT = "deferred_target_limit"
    NEVER_DUE = "never_due"
    NOT_YET_DUE = "not_yet_due"
    INACTIVE = "inactive"
    NO_RECORD = "no_record"


@dataclass(frozen=True)
class RunFact:
    id: str
    state: str
    trigger: str
    scheduled_for: datetime
    attempt: int
    lateness: timedelta | None
    start_lag: timedelta | None
    published_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str


@dataclass(frozen=True)
class EventFact:
    kind: str  # jobs.models_reasons.JobEventKind values
    at: datetime


@dataclass(frozen=True)
class ReasonFact:
    kind: str  # jobs.models_reasons.ReasonKind values
    first_at: datetime
    last_at: datetime
    count: int
    recorded_at: datetime
    updated_at: datetime
    detail: str


@dataclass(frozen=True)
class Facts:
    at: datetime
    # The schedule in force at ``at`` (before any later edit); None: the job has no schedule
    # of its own (it runs after its parents).
    spec: ScheduleSpec | None
    job_status: str
    job_created_at: datetime
    job_next_fire_at: datetime | None
    run: RunFact | None = None
    # The job's pause/resume/cancel events: the last at or before ``at``, the first after it.
    event_before: EventFact | None = None
    event_after: EventFact | None = None
    # Edits of the schedule after ``at`` (the schedule judged is the one before them).
    edited_after: datetime | None = None
    reasons: tuple[ReasonFact, ...] = ()
    late_after: timedelta = timedelta(seconds=1)


@dataclass(frozen=True)
class Explanation:
    verdict: Verdict
    reason: str
    at: datetime
    is_firing: bool
    previous_firing: datetime | None
    next_firing: datetime | None
    run_id: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def previous_fire_before(spec: ScheduleSpec, at: datetime) -> datetime | None:
    """The last firing strictly before ``at``, looking back at most about eight years."""
    for window in _LOOKBACK:
        found = last_fires(spec, at - window, at - _MICROSECOND, 1)
        if found:
            return found[-1]
    return None


def is_firing(spec: ScheduleSpec, at: datetime) -> bool:
    return next_fire_after(spec, at - _MICROSECOND) == at


def _when(instant: datetime | None, zone: str) -> str:
    if instant is None:
        return "none"
    utc = instant.astimezone(UTC)
    if zone == "UTC":
        return utc.isoformat()
    return f"{instant.astimezone(ZoneInfo(zone)).isoformat()} ({utc.isoformat()})"


def _secs(delta: timedelta) -> str:
    return f"{delta.total_seconds():.3f} s"


def _reason(facts: Facts, kind: str) -> ReasonFact | None:
    for reason in facts.reasons:
        if reason.kind == kind and reason.first_at <= facts.at <= reason.last_at:
            return reason
    return None


def _paused_at(facts: Facts) -> str | None:
    """A sentence if the job was paused at ``facts.at``, else None."""
    before, after = facts.event_before, facts.event_after
    if before is not None and before.kind == "paused":
        return f"the job was paused at {before.at.isoformat()}"
    if before is None and after is not None and after.kind == "resumed":
        return f"the job was paused then (resumed at {after.at.isoformat()})"
    if before is None and after is None and facts.job_status == "paused":
        return "the job is paused (no record of when it was paused)"
    return None


def _cancelled_at(facts: Facts) -> str | None:
    before = facts.event_before
    if before is not None and before.kind == "cancelled":
        return f"the job was cancelled at {before.at.isoformat()}"
    return None


class _Out:
    """Builds the Explanation; every verdict carries the same schedule context."""

    def __init__(self, facts: Facts) -> None:
        spec = facts.spec
        self.facts = facts
        self.zone = spec.timezone if spec is not None else "UTC"
        self.firing = spec is not None and is_firing(spec, facts.at)
        self.previous = previous_fire_before(spec, facts.at) if spec is not None else None
        self.following = next_fire_after(spec, facts.at) if spec is not None else None

    def __call__(self, verdict: Verdict, reason: str, **evidence: Any) -> Explanation:
        facts = self.facts
        if facts.edited_after is not None:
            evidence["schedule_edited_at"] = facts.edited_after.isoformat()
        return Explanation(
            verdict=verdict,
            reason=reason,
            at=facts.at,
            is_firing=self.firing,
            previous_firing=self.previous,
            next_firing=self.following,
            run_id=facts.run.id if facts.run is not None else None,
            evidence=evidence,
        )


def explain(facts: Facts, *, now: datetime) -> Explanation:
    """The verdict for ``facts.at``; ``now`` is the database's clock."""
    out = _Out(facts)
    if facts.run is not None:
        return _with_run(facts, facts.run, now, out)
    at = facts.at
    if facts.spec is None:
        return out(
            Verdict.NEVER_DUE, "the job has no schedule of its own: it runs after its parents"
        )
    if not out.firing:
        return out(
            Verdict.NEVER_DUE,
            f"the schedule does not fire at {_when(at, out.zone)}; the nearest firings are "
            f"{_when(out.previous, out.zone)} before and {_when(out.following, out.zone)} after",
        )
    if at < facts.job_created_at:
        return out(
            Verdict.INACTIVE,
            f"the job was created at {facts.job_created_at.isoformat()}, after this firing",
        )
    if at > now:
        return _future(facts, now, out)
    return _past_without_run(facts, now, out)


def _future(facts: Facts, now: datetime, out: _Out) -> Explanation:
    if facts.job_status == "paused":
        return out(Verdict.PAUSED, "the job is paused: it will not fire unless resumed")
    if facts.job_status in ("cancelled", "completed"):
        return out(Verdict.INACTIVE, f"the job is {facts.job_status}: it fires no more")
    return out(Verdict.NOT_YET_DUE, f"the firing is {_secs(facts.at - now)} ahead")


def _past_without_run(facts: Facts, now: datetime, out: _Out) -> Explanation:
    at = facts.at
    paused = _paused_at(facts)
    if paused is not None:
        return out(Verdict.PAUSED, f"not fired: {paused}")
    cancelled = _cancelled_at(facts)
    if cancelled is not None:
        return out(Verdict.INACTIVE, f"not fired: {cancelled}")
    missed = _reason(facts, "missed_catch_up")
    if missed is not None:
        return out(Verdict.MISSED_CATCH_UP, _missed_sentence(missed), **_reason_evidence(missed))
    deferred = _reason(facts, "deferred_tenant_limit")
    if deferred is not None:
        return out(
            Verdict.DEFERRED_TENANT_LIMIT,
            f"not fired yet: {_deferred_sentence(deferred)}",
            **_reason_evidence(deferred),
        )
    due = facts.job_next_fire_at
    if facts.job_status == "active" and due is not None and due <= at:
        return out(
            Verdict.ENGINE_LATE,
            f"due {_secs(now - at)} ago and not yet claimed by the engine",
            behind_s=(now - at).total_seconds(),
        )
    return out(
        Verdict.NO_RECORD,
        "no run and no recorded reason for this firing: its history is older than the "
        "retention, or the schedule was changed since",
    )


def _with_run(facts: Facts, run: RunFact, now: datetime, out: _Out) -> Explanation:
    at = facts.at
    evidence: dict[str, Any] = {
        "run_id": run.id,
        "state": run.state,
        "trigger": run.trigger,
        "attempt": run.attempt,
        "lateness_s": None if run.lateness is None else run.lateness.total_seconds(),
        "start_lag_s": None if run.start_lag is None else run.start_lag.total_seconds(),
    }
    if run.state == "missed":
        paused = _paused_at(facts)
        missed = _reason(facts, "missed_catch_up")
        if missed is not None:
            evidence.update(_reason_evidence(missed))
        if paused is not None:
            return out(
                Verdict.PAUSED,
                f"not fired: {paused}; on resume the catch-up policy recorded it as missed",
                **evidence,
            )
        sentence = _missed_sentence(missed) if missed is not None else run.last_error
        return out(Verdict.MISSED_CATCH_UP, sentence or "missed by the catch-up policy", **evidence)
    if run.state == "skipped":
        return out(
            Verdict.SKIPPED_CONCURRENCY,
            "skipped by the concurrency policy: "
            + (run.last_error or "a previous run of the job was in flight"),
            **evidence,
        )
    late = run.lateness
    deferred = _reason(facts, "deferred_tenant_limit")
    if deferred is not None:
        evidence.update(_reason_evidence(deferred))
        return out(
            Verdict.DEFERRED_TENANT_LIMIT,
            f"fired late ({_secs(late) if late is not None else 'not yet published'}): "
            f"{_deferred_sentence(deferred)}",
            **evidence,
        )
    target_waits = _target_waits(facts)
    if target_waits:
        # Published, then held back at its start by its target's rate limit (or answered
        # 429/503): the wait was the target's, not the engine's (jobs/services/target_waits.py).
        evidence.update(_reason_evidence(target_waits[-1]))
        return out(
            Verdict.DEFERRED_TARGET_LIMIT,
            f"run {run.id} ({run.state}) waited for its target: "
            + "; ".join(_target_sentence(reason) for reason in target_waits),
            **evidence,
        )
    if late is not None and late > facts.late_after:
        return out(
            Verdict.ENGINE_LATE,
            f"fired {_secs(late)} after it was due (run {run.id}, {run.state}): the engine "
            f"was late",
            **evidence,
        )
    if late is None and run.state in ("queued", "pending") and now - at > facts.late_after:
        return out(
            Verdict.ENGINE_LATE,
            f"claimed but not published {_secs(now - at)} after it was due (run {run.id}, "
            f"{run.state})",
            **evidence,
        )
    shown = "" if late is None else f", lateness {_secs(late)}"
    waited = run.start_lag
    if waited is not None and waited > facts.late_after:
        # Published on time, started late: the workers were busy, not the engine late.
        shown += f"; started {_secs(waited)} after it was due: no worker was free sooner"
    return out(Verdict.FIRED, f"it fired: run {run.id} ({run.state}{shown})", **evidence)


def _missed_sentence(reason: ReasonFact) -> str:
    span = (
        f"the firing at {reason.first_at.isoformat()}"
        if reason.count == 1
        else f"{reason.count} firings from {reason.first_at.isoformat()} to "
        f"{reason.last_at.isoformat()}"
    )
    detail = f" ({reason.detail})" if reason.detail else ""
    return (
        f"missed by the catch-up policy{detail}: the engine recorded {span} as missed at "
        f"{reason.recorded_at.isoformat()}"
    )


def _deferred_sentence(reason: ReasonFact) -> str:
    # The same kind covers the queued-run cap (at the claim) and the running limits (at the
    # start, jobs/services/running_limits.py), whose detail names the limit.
    if reason.detail.startswith("running limit"):
        limit = f"its running limit ({reason.detail.removeprefix('running limit: ')})"
    else:
        limit = "the tenant's limit on queued runs"
    return (
        f"held back {reason.count} times by {limit}, from "
        f"{reason.recorded_at.isoformat()} to {reason.updated_at.isoformat()}"
    )


def _target_waits(facts: Facts) -> list[ReasonFact]:
    found = (_reason(facts, kind) for kind in ("deferred_target_limit", "throttled_by_target"))
    return [reason for reason in found if reason is not None]


def _target_sentence(reason: ReasonFact) -> str:
    why = "answered 429/503" if reason.kind == "throttled_by_target" else "rate limit held it"
    return (
        f"{why} {reason.count} time{'' if reason.count == 1 else 's'}, from "
        f"{reason.recorded_at.isoformat()} to "
        f"{reason.updated_at.isoformat()} (last: {reason.detail})"
    )


def _reason_evidence(reason: ReasonFact) -> dict[str, Any]:
    return {
        "recorded": {
            "kind": reason.kind,
            "first_at": reason.first_at.isoformat(),
            "last_at": reason.last_at.isoformat(),
            "count": reason.count,
            "recorded_at": reason.recorded_at.isoformat(),
            "updated_at": reason.updated_at.isoformat(),
            "detail": reason.detail,
        }
    }
