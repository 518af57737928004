"""The run state machine: terminal states are final, every state is reachable from pending."""

from __future__ import annotations

import pytest

from jobs.states import (
    ALLOWED_TRANSITIONS,
    CREATED_ONLY_STATES,
    TERMINAL_STATES,
    RunState,
    can_transition,
    sources_of,
)


def test_every_state_has_an_entry() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(RunState)


@pytest.mark.parametrize(
    "state", [RunState.SUCCEEDED, RunState.SKIPPED, RunState.MISSED, RunState.CANCELLED]
)
def test_final_states_have_no_way_out(state: RunState) -> None:
    assert ALLOWED_TRANSITIONS[state] == frozenset()


def test_every_state_is_reachable_from_pending() -> None:
    # A run created in upstream_failed is reachable by creation, and re-armed from there.
    seen = {RunState.PENDING, *CREATED_ONLY_STATES}
    frontier = [RunState.PENDING, *CREATED_ONLY_STATES]
    while frontier:
        for target in ALLOWED_TRANSITIONS[frontier.pop()]:
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    assert seen == set(RunState)


@pytest.mark.parametrize(
    ("current", "target", "allowed"),
    [
        (RunState.QUEUED, RunState.RUNNING, True),
        (RunState.RUNNING, RunState.RETRY_WAIT, True),
        (RunState.RETRY_WAIT, RunState.QUEUED, True),
        (RunState.RUNNING, RunState.QUEUED, True),
        (RunState.SUCCEEDED, RunState.RUNNING, False),
        (RunState.CANCELLED, RunState.QUEUED, False),
        (RunState.PENDING, RunState.SUCCEEDED, False),
        (RunState.DEAD, RunState.PENDING, True),
        (RunState.UPSTREAM_FAILED, RunState.PENDING, True),
        (RunState.UPSTREAM_FAILED, RunState.QUEUED, False),
        (RunState.PENDING, RunState.UPSTREAM_FAILED, False),
    ],
)
def test_can_transition(current: RunState, target: RunState, allowed: bool) -> None:
    assert can_transition(current, target) is allowed


def test_sources_of_running_is_only_queued() -> None:
    # The worker's compare-and-set relies on this: only a queued run can start.
    assert sources_of(RunState.RUNNING) == frozenset({RunState.QUEUED})


def test_terminal_states_are_those_without_retry_or_replay() -> None:
    for state in TERMINAL_STATES:
        assert RunState.RUNNING not in ALLOWED_TRANSITIONS[state]


def test_upstream_failed_is_terminal_and_never_entered_by_a_transition() -> None:
    assert RunState.UPSTREAM_FAILED in TERMINAL_STATES
    assert sources_of(RunState.UPSTREAM_FAILED) == frozenset()
