"""The soak's fault plan: drawn from a seed, spread over the window, every victim back in time."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.soak.plan import Fault, FaultKind, FaultRule, actions, fault_plan
from bench.soak.profiles import FULL, QUICK

RULES = {
    FaultKind.BEAT_KILL: FaultRule(60, down_s=(1.0, 8.0), targets=2),
    FaultKind.WORKER_KILL: FaultRule(30, down_s=(1.0, 8.0), targets=2),
    FaultKind.REDIS_RESTART: FaultRule(120, down_s=(0.5, 4.0), targets=1),
}


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    first = fault_plan(7, start_s=10, end_s=600, rules=RULES)

    assert fault_plan(7, start_s=10, end_s=600, rules=RULES) == first
    assert fault_plan(8, start_s=10, end_s=600, rules=RULES) != first


def test_the_quick_profile_has_every_kind_of_fault_whatever_the_seed() -> None:
    for seed in range(50):
        plan = fault_plan(
            seed, start_s=QUICK.warmup_s, end_s=QUICK.window_s - QUICK.quiet_s, rules=QUICK.rules
        )

        assert set(Counter(f.kind for f in plan)) == set(FaultKind), seed


def test_the_count_follows_the_window_over_the_mean_gap() -> None:
    plan = fault_plan(3, start_s=0, end_s=1200, rules=RULES)

    counts = Counter(f.kind for f in plan)
    # 1200 s / 30 s = 40 worker kills, fewer only where a target was still down.
    assert 36 <= counts[FaultKind.WORKER_KILL] <= 40
    assert 18 <= counts[FaultKind.BEAT_KILL] <= 20
    assert counts[FaultKind.REDIS_RESTART] == 10


@pytest.mark.parametrize("seed", range(20))
def test_every_fault_is_inside_the_window_and_never_hits_a_target_that_is_down(seed: int) -> None:
    plan = fault_plan(seed, start_s=15, end_s=FULL.window_s - 25, rules=FULL.rules, settle_s=5)

    by_target: dict[tuple[FaultKind, int], list[Fault]] = {}
    for fault in plan:
        assert fault.at_s >= 15
        assert fault.back_s <= FULL.window_s - 25
        by_target.setdefault((fault.kind, fault.target), []).append(fault)
    for faults in by_target.values():
        for earlier, later in itertools.pairwise(faults):
            assert later.at_s >= earlier.back_s + 5


def test_actions_bring_each_victim_down_then_up_in_time_order() -> None:
    plan = [
        Fault(10.0, FaultKind.WORKER_KILL, 1, 3.0),
        Fault(11.0, FaultKind.REDIS_RESTART, 0, 0.5),
    ]

    steps = actions(plan)

    assert [(a.at_s, a.kind, a.up) for a in steps] == [
        (10.0, FaultKind.WORKER_KILL, False),
        (11.0, FaultKind.REDIS_RESTART, False),
        (11.5, FaultKind.REDIS_RESTART, True),
        (13.0, FaultKind.WORKER_KILL, True),
    ]


def test_an_empty_window_is_refused() -> None:
    with pytest.raises(ValueError, match="window"):
        fault_plan(1, start_s=100, end_s=100, rules=RULES)
