"""The order in which sync_schedules writes declarations: every parent before its children.

Declarations name their parents (``@scheduled(after=[...])``) by job name, in any order and
across modules, so the first pass reads them all and orders them; the second pass writes each
job with its parents' ids, which by then exist. A cycle among the declarations is refused here,
naming it, before anything is written; a cycle through a job not declared in code (created by
the API) is refused by the dependency service when the edge is written, in the same
transaction, so the sync changes nothing either way.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobs.decorators import ScheduleDeclaration
from jobs.errors import InvalidInput

FIELD = "depends_on"


def _cycle(waiting: dict[str, set[str]], start: str) -> list[str]:
    """A cycle through the declarations left waiting: each still waits for a parent that is
    itself waiting, so following the first of them must come back to a name already seen."""
    path: list[str] = []
    seen: dict[str, int] = {}
    node = start
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(waiting[node])
    # Followed from child to parent; told from parent to child, as the edges run.
    return [node, *reversed(path[seen[node] :])]


def parents_first(declarations: Sequence[ScheduleDeclaration]) -> list[ScheduleDeclaration]:
    """``declarations`` ordered so that every declared parent comes before its children (by
    name among equals); raises InvalidInput(field="depends_on") naming a cycle among them."""
    by_name = {decl.name: decl for decl in declarations}
    waiting = {name: {p for p in decl.after if p in by_name} for name, decl in by_name.items()}
    ordered: list[ScheduleDeclaration] = []
    ready = sorted(name for name, parents in waiting.items() if not parents)
    children: dict[str, list[str]] = {}
    for name, parents in waiting.items():
        for parent in parents:
            children.setdefault(parent, []).append(name)
    while ready:
        name = ready.pop(0)
        ordered.append(by_name[name])
        for child in sorted(children.get(name, ())):
            waiting[child].discard(name)
            if not waiting[child]:
                ready.append(child)
        ready.sort()
    if len(ordered) < len(by_name):
        stuck = min(name for name, parents in waiting.items() if parents)
        cycle = _cycle(waiting, stuck)
        raise InvalidInput(
            FIELD,
            "the @scheduled(after=...) declarations form a cycle (parent -> child): "
            + " -> ".join(cycle),
        )
    return ordered
