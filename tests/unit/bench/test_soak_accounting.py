"""The soak's verdicts: lost firings, duplicate effects, attempts after cancel, lateness."""

from __future__ import annotations

import pytest

from bench.soak.accounting import (
    CANCEL_CLAIM_GRACE_S,
    AttemptFact,
    CancelRecord,
    RunFact,
    WorkerKill,
    attempts_after_cancel,
    count_firings,
    count_repeats,
    lateness_by_cause,
    spread,
)
from bench.soak.ledger import Delivery, effects_by_key, ledger_line, parse_ledger
from bench.soak.workload import firing_key

AT = "2026-12-01T09:00:00.000000+00:00"
EPOCH = 1_796_115_600.0  # AT


def key(job: str) -> tuple[str, str]:
    return firing_key(job, AT)


def delivery(job: str, run: str, attempt: int, at: float, status: int = 200) -> Delivery:
    return Delivery(job, AT, run, attempt, status, at, f"key-{job}")


def test_a_ledger_line_reads_back_as_the_delivery_it_records() -> None:
    headers = {
        "X-Scheduler-Job-Id": "job-a",
        "X-Scheduler-Scheduled-For": "2026-12-01T09:00:00+00:00",
        "X-Scheduler-Run-Id": "run-a",
        "X-Scheduler-Attempt": "2",
        "Idempotency-Key": "k",
    }
    lines = [ledger_line(headers, 200, 12.5), '{"job": "torn', ledger_line({}, 200, 13.0), ""]

    deliveries, unreadable = parse_ledger(lines)

    assert deliveries == [
        Delivery("job-a", "2026-12-01T09:00:00+00:00", "run-a", 2, 200, 12.5, "k")
    ]
    assert unreadable == 2  # the torn line, and a request without the scheduler's headers


def test_only_2xx_answers_are_effects_in_the_order_received() -> None:
    late, early = delivery("a", "r", 2, 20.0), delivery("a", "r", 1, 10.0)
    failed = delivery("b", "s", 1, 5.0, status=503)

    assert effects_by_key([late, failed, early]) == {key("a"): [early, late]}


def test_each_expected_firing_is_applied_dead_cancelled_recorded_or_lost() -> None:
    expected = {key(j): EPOCH for j in "abcdefgh"}
    effects = {key("a"): [delivery("a", "ra", 1, EPOCH)], key("z"): [delivery("z", "rz", 1, 0)]}
    runs = {
        key("b"): RunFact("rb", "b", "dead", dead_lettered=True),
        key("c"): RunFact("rc", "c", "cancelled", dead_lettered=False),
        # Cancelled, but not by the soak: nothing excuses it.
        key("d"): RunFact("rd", "d", "cancelled", dead_lettered=False),
        key("e"): RunFact("re", "e", "skipped", dead_lettered=False),
        key("f"): RunFact("rf", "f", "succeeded", dead_lettered=False),
    }
    # g's job was cancelled just after the firing was due: it may never have been claimed.
    # h's job was cancelled long after: its firing should have had a run by then.
    cancels = {"g": EPOCH + 1, "h": EPOCH + CANCEL_CLAIM_GRACE_S + 1}

    counts = count_firings(expected, effects, runs, {"rc"}, cancels, expected)

    assert (counts.expected, counts.applied, counts.dead_lettered, counts.cancelled) == (8, 1, 1, 1)
    assert counts.missed_or_skipped == 1
    assert counts.unfired_before_job_cancel == 1
    assert counts.lost == 3
    assert counts.lost_by_state == {"cancelled": 1, "succeeded": 1, "no run": 1}
    assert sorted(counts.lost_examples) == [key("d"), key("f"), key("h")]
    assert counts.unexpected == 1  # z fired, but no schedule defines it


def test_a_repeated_critical_effect_is_a_duplicate_unless_its_sender_was_killed() -> None:
    first, second = delivery("a", "r", 1, 100.0), delivery("a", "r", 2, 115.0)
    lost = {("r", 1): AttemptFact("r", "a", 1, "vm:41", "lost", started_at=98.0)}
    # Killed while the request was on the wire: the target still answered it afterwards.
    kill_after_start = [WorkerKill(99.0, frozenset({40, 41}))]
    kill_before_start = [WorkerKill(97.0, frozenset({41}))]
    effects = {key("a"): [first, second]}

    explained = count_repeats(effects, {"a"}, lost, kill_after_start)
    unexplained = count_repeats(effects, {"a"}, lost, kill_before_start)

    assert (explained.critical_keys, explained.duplicate_effects, explained.explained) == (1, 0, 1)
    assert (unexplained.duplicate_effects, unexplained.explained) == (1, 0)
    assert unexplained.examples == [key("a")]


@pytest.mark.parametrize(
    ("earlier", "outcome"),
    [
        # The same attempt twice is never at-least-once.
        (("r", 2), "lost"),
        # An attempt that recorded success made the key done: nothing may run the target again.
        (("r", 1), "succeeded"),
    ],
)
def test_a_kill_never_excuses_a_repeat_after_success_or_of_one_attempt(
    earlier: tuple[str, int], outcome: str
) -> None:
    effects = {key("a"): [delivery("a", *earlier, 100.0), delivery("a", "r", 2, 115.0)]}
    attempts = {earlier: AttemptFact("r", "a", earlier[1], "vm:41", outcome, started_at=98.0)}

    repeats = count_repeats(effects, {"a"}, attempts, [WorkerKill(99.0, frozenset({41}))])

    assert repeats.duplicate_effects == 1


def test_repeats_of_non_critical_jobs_are_counted_apart() -> None:
    effects = {key("b"): [delivery("b", "r", 1, 1.0), delivery("b", "r", 2, 2.0)]}

    repeats = count_repeats(effects, {"a"}, {}, [])

    assert (repeats.critical_keys, repeats.duplicate_effects) == (0, 0)
    assert (repeats.other_keys, repeats.other_unexplained) == (1, 1)


def test_attempts_that_did_not_exist_when_a_cancel_was_acknowledged() -> None:
    attempts = [
        AttemptFact("r1", "a", 1, "vm:1", "cancelled"),  # running when cancelled: allowed
        AttemptFact("r1", "a", 2, "vm:2", "succeeded"),  # started after the cancel
        AttemptFact("r2", "b", 1, "vm:1", "succeeded"),  # its job was cancelled later
        AttemptFact("r3", "b", 1, "vm:1", "succeeded"),  # a run of that job after its cancel
        AttemptFact("r4", "c", 1, "vm:1", "succeeded"),  # nobody cancelled it
    ]
    cancels = [
        CancelRecord("run", "a", "r1", 10.0, frozenset({("r1", 1)})),
        CancelRecord("job", "b", None, 20.0, frozenset({("r2", 1)})),
        # Cancelled twice: the later cancel saw more, the earlier one still judges; one report.
        CancelRecord("run", "a", "r1", 11.0, frozenset({("r1", 1), ("r1", 2)})),
    ]

    found = attempts_after_cancel(cancels, attempts)

    assert [(f.run_id, f.attempt) for f in found] == [("r1", 2), ("r3", 1)]


def test_spread_is_p50_p99_and_max_by_nearest_rank() -> None:
    assert spread(float(v) for v in range(1, 101)) == (50.0, 99.0, 100.0)
    assert spread([3.0]) == (3.0, 3.0, 3.0)
    assert spread([]) is None


def test_lateness_is_split_by_the_fault_each_firing_was_due_in() -> None:
    lateness = [(100.0, 0.1), (105.0, 20.0), (121.0, 9.0), (140.0, 0.2)]
    outages = [("redis-restart", 104.0, 106.0), ("beat-kill", 118.0, 119.0)]

    split = lateness_by_cause(lateness, outages, after_s=15.0)

    # 121 s is within 15 s of the beat node's return (119 s), not of Redis's (106 s + 15 s).
    assert split == {
        "beat-kill": (9.0, 9.0, 9.0),
        "no fault": (0.1, 0.2, 0.2),
        "redis-restart": (20.0, 20.0, 20.0),
    }
