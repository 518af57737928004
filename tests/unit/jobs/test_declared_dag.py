"""The order sync_schedules writes declarations in: parents first, cycles refused by name."""

from __future__ import annotations

import pytest

from jobs.decorators import ScheduleDeclaration
from jobs.errors import InvalidInput
from jobs.services.declared_dag import parents_first


def _decl(name: str, *after: str) -> ScheduleDeclaration:
    cron = None if after else "0 2 * * *"
    return ScheduleDeclaration(name, "callable", "demo.heartbeat", cron, None, "UTC", False,
                               after=after)  # fmt: skip


def test_parents_come_first_whatever_the_declaration_order() -> None:
    declared = [_decl("z-report", "b-fees", "a-balances"), _decl("b-fees", "ledger"),
                _decl("a-balances", "ledger"), _decl("ledger"), _decl("other")]  # fmt: skip

    order = [d.name for d in parents_first(declared)]

    assert order == ["ledger", "a-balances", "b-fees", "other", "z-report"]


def test_a_parent_not_declared_does_not_hold_its_child_back() -> None:
    assert [d.name for d in parents_first([_decl("report", "api-job")])] == ["report"]


@pytest.mark.parametrize(
    ("declared", "cycle"),
    [
        ([_decl("a", "a")], "a -> a"),
        ([_decl("a", "b"), _decl("b", "a"), _decl("c")], "a -> b -> a"),
        # d waits behind the cycle but is not part of it.
        ([_decl("d", "c"), _decl("c", "e"), _decl("e", "c"), _decl("root")], "c -> e -> c"),
        # x runs after z, z after y, y after x: the edges run x -> y -> z -> x.
        ([_decl("x", "z"), _decl("y", "x"), _decl("z", "y")], "x -> y -> z -> x"),
    ],
)
def test_a_cycle_is_refused_naming_it(declared: list[ScheduleDeclaration], cycle: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parents_first(declared)
    assert refused.value.field == "depends_on"
    assert refused.value.message.endswith(f"form a cycle (parent -> child): {cycle}")
