"""The concurrency policy's decision, for every policy, state of the other run and order."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from jobs.services.overlap import Sibling, Verdict, decide, skip_reason
from jobs.states import RunState

T = datetime(2026, 1, 1, tzinfo=UTC)
EARLIER, LATER = T - timedelta(minutes=1), T + timedelta(minutes=1)
WAITING = [RunState.QUEUED, RunState.RETRY_WAIT]
IN_FLIGHT = [RunState.QUEUED, RunState.RUNNING, RunState.RETRY_WAIT]


def _other(state: RunState, at: datetime) -> Sibling:
    return Sibling(uuid.uuid4(), state, at)


@pytest.mark.parametrize("state", IN_FLIGHT)
@pytest.mark.parametrize(("attempt", "verdict"), [(1, Verdict.SKIP), (2, Verdict.DEFER)])
def test_forbid_holds_back_a_run_behind_an_earlier_one_in_flight(
    state: RunState, attempt: int, verdict: Verdict
) -> None:
    earlier = _other(state, EARLIER)

    decision = decide("forbid", scheduled_for=T, attempt=attempt, others=[earlier])

    assert (decision.verdict, decision.blocker) == (verdict, earlier)


@pytest.mark.parametrize(("attempt", "verdict"), [(1, Verdict.SKIP), (2, Verdict.DEFER)])
def test_forbid_holds_back_even_an_earlier_firing_while_a_later_one_runs(
    attempt: int, verdict: Verdict
) -> None:
    later = _other(RunState.RUNNING, LATER)

    decision = decide("forbid", scheduled_for=T, attempt=attempt, others=[later])

    assert (decision.verdict, decision.blocker) == (verdict, later)


@pytest.mark.parametrize("state", WAITING)
def test_forbid_lets_the_earliest_firing_go_before_later_waiting_ones(state: RunState) -> None:
    decision = decide("forbid", scheduled_for=T, attempt=1, others=[_other(state, LATER)])

    assert decision.verdict == Verdict.START
    assert decision.replaces == ()


def test_forbid_names_a_running_run_before_an_earlier_waiting_one() -> None:
    waiting, running = _other(RunState.QUEUED, EARLIER), _other(RunState.RUNNING, LATER)

    decision = decide("forbid", scheduled_for=T, attempt=1, others=[waiting, running])

    assert decision.blocker == running
    assert skip_reason("forbid", running) == (
        f"skipped: run {running.id} (firing {LATER.isoformat()}) of this job is still running"
        " (forbid)"
    )


@pytest.mark.parametrize("state", IN_FLIGHT)
@pytest.mark.parametrize("attempt", [1, 2])
def test_replace_skips_a_run_older_than_one_in_flight(state: RunState, attempt: int) -> None:
    newer = _other(state, LATER)

    decision = decide("replace", scheduled_for=T, attempt=attempt, others=[newer])

    assert (decision.verdict, decision.blocker, decision.replaces) == (Verdict.SKIP, newer, ())
    assert "superseded by the newer" in skip_reason("replace", newer)


def test_replace_starts_the_newest_and_replaces_every_older_run_in_flight() -> None:
    older = [_other(state, EARLIER - timedelta(minutes=i)) for i, state in enumerate(IN_FLIGHT)]

    decision = decide("replace", scheduled_for=T, attempt=1, others=older)

    assert decision.verdict == Verdict.START
    assert set(decision.replaces) == set(older)


@pytest.mark.parametrize("state", IN_FLIGHT)
def test_allow_always_starts(state: RunState) -> None:
    others = [_other(state, EARLIER), _other(state, LATER)]

    decision = decide("allow", scheduled_for=T, attempt=2, others=others)

    assert (decision.verdict, decision.replaces) == (Verdict.START, ())
