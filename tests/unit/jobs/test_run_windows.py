"""The windows a page of runs is read in (jobs/run_windows.py): whatever the bounds and the
clock, they cover the page's range without a gap or an overlap, in the page's order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from jobs.run_windows import REACH_DAYS, Window, windows

instants = st.datetimes(
    min_value=datetime(1960, 1, 1),  # noqa: DTZ001 - naive bounds, UTC instants
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def _holding(found: list[Window], at: datetime) -> list[int]:
    return [
        i
        for i, w in enumerate(found)
        if (w.since is None or w.since <= at) and (w.until is None or at < w.until)
    ]


@given(
    since=st.none() | instants,
    until=st.none() | instants,
    now=instants,
    ascending=st.booleans(),
    probes=st.lists(instants, min_size=1, max_size=20),
)
def test_every_instant_of_the_range_is_in_exactly_one_window_in_order(
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    ascending: bool,
    probes: list[datetime],
) -> None:
    found = windows(since=since, until=until, now=now, ascending=ascending)

    # Consecutive windows meet: the first starts at the page's edge, the last ends at the other.
    if ascending:
        assert found[0].since == since
        assert found[-1].until == until
        assert all(a.until == b.since for a, b in pairwise(found))
    else:
        assert found[0].until == until
        assert found[-1].since == since
        assert all(a.since == b.until for a, b in pairwise(found))
    for at in probes + [w.since for w in found if w.since] + [w.until for w in found if w.until]:
        in_range = (since is None or since <= at) and (until is None or at < until)
        assert len(_holding(found, at)) == (1 if in_range else 0)


def test_a_first_page_reads_the_last_day_and_what_follows_it_first() -> None:
    now = datetime(2031, 3, 10, 12, tzinfo=UTC)

    found = windows(since=None, until=None, now=now)

    assert found == [
        Window(now - timedelta(days=REACH_DAYS[0]), None),
        Window(now - timedelta(days=REACH_DAYS[1]), now - timedelta(days=REACH_DAYS[0])),
        Window(now - timedelta(days=REACH_DAYS[2]), now - timedelta(days=REACH_DAYS[1])),
        Window(None, now - timedelta(days=REACH_DAYS[2])),
    ]


def test_a_narrow_range_is_one_window() -> None:
    until = datetime(2031, 3, 10, 12, tzinfo=UTC)
    since = until - timedelta(hours=3)

    assert windows(since=since, until=until, now=until) == [Window(since, until)]
    assert windows(since=since, until=until, now=until, ascending=True) == [Window(since, until)]
