"""The windows of time a page of one job's runs is read in, so that PostgreSQL plans a few day
partitions per query instead of every one.

A query on ``jobs_jobrun`` that bounds ``scheduled_for`` only is planned over every partition:
with a month hot (about forty partitions) the planning alone costs more than the page. The
same bound on the run id, which starts with its firing's millisecond (jobs/run_ids.py), lets
the planner drop every partition outside it. A page is therefore read window by window, newest
first (oldest first for a page backwards), each window reaching further than the one before;
the windows cover the page's whole range without overlap, so the rows come out in the same
order and none is missed, whatever the windows' widths (docs/history.md, "Partitions").

Pure: no Django, no database. ``jobs/selectors.py`` turns a window into its filter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# How far each window reaches from the page's edge, in days. A job that fires every minute
# fills a page of 20 from the first window, a daily one from the third; the last window is
# open, so a job with few runs costs one more query over the rest of the history.
REACH_DAYS = (1, 8, 64)


@dataclass(frozen=True)
class Window:
    """``[since, until)`` of ``scheduled_for``; None is unbounded."""

    since: datetime | None
    until: datetime | None


def windows(
    *, since: datetime | None, until: datetime | None, now: datetime, ascending: bool = False
) -> list[Window]:
    """Disjoint windows covering ``[since, until)``, newest first (or oldest first).

    The windows reach from the page's starting edge (``until`` going down, ``since`` going up)
    or, when that edge is open, from ``now``: a first page without bounds starts with the last
    day and everything after it, so a run due in the future still comes first.
    """
    if since is not None and until is not None and since >= until:
        return [Window(since, until)]
    found: list[Window] = []
    if ascending:
        anchor = since if since is not None else now
        low = since
        for days in REACH_DAYS:
            edge = anchor + timedelta(days=days)
            if until is not None and edge >= until:
                break
            found.append(Window(low, edge))
            low = edge
        found.append(Window(low, until))
        return found
    anchor = until if until is not None else now
    high = until
    for days in REACH_DAYS:
        edge = anchor - timedelta(days=days)
        if since is not None and edge <= since:
            break
        found.append(Window(edge, high))
        high = edge
    found.append(Window(since, high))
    return found
