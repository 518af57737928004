"""The runs page's hand-written writer says what RunOut says, field for field and in order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.renderers import JSONRenderer

from jobs.api.serializers_runs import RUN_OUT_COLUMNS, RunOut, run_rows_out
from jobs.states import RunState

_zones = st.sampled_from(
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
)
# Naive bounds are what hypothesis asks for; timezones= makes every instant aware.
_instants = st.datetimes(
    min_value=datetime(1970, 1, 2),  # noqa: DTZ001
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=_zones,
)
_spans = st.timedeltas(min_value=timedelta(seconds=-86_400), max_value=timedelta(days=3))
_rows = st.fixed_dictionaries(
    {
        "id": st.uuids(),
        "job_id": st.uuids(),
        "scheduled_for": _instants,
        "upstream_run_ids": st.lists(st.uuids(), max_size=3),
        "trigger": st.sampled_from(["schedule", "manual", "backfill", "replay"]),
        "state": st.sampled_from([state.value for state in RunState]),
        "attempt": st.integers(min_value=1, max_value=50),
        "due_at": st.none() | _instants,
        "queued_at": st.none() | _instants,
        "started_at": st.none() | _instants,
        "finished_at": st.none() | _instants,
        "lateness": st.none() | _spans,
        "start_lag": st.none() | _spans,
        "cancel_requested": st.booleans(),
        "last_error": st.text(max_size=40),
        "replayed_count": st.integers(min_value=0, max_value=10_000),
        "created_at": _instants,
    }
)


def _wire(data: Any) -> bytes:
    # The bytes a client gets: 1 and 1.0, or a key order, differ here though == holds.
    return JSONRenderer().render(data)


@settings(max_examples=300, deadline=None)
@given(st.lists(_rows, max_size=5))
def test_rows_are_written_as_run_out_writes_them(rows: list[dict[str, Any]]) -> None:
    assert _wire(run_rows_out(rows)) == _wire(RunOut(rows, many=True).data)


def test_every_run_out_field_is_written() -> None:
    """A field added to RunOut and not to the writer fails here, whatever the rows hold."""
    row = {
        "id": "0" * 8 + "-0000-0000-0000-" + "0" * 12,
        "job_id": "1" * 8 + "-1111-1111-1111-" + "1" * 12,
        "scheduled_for": datetime(2026, 1, 1, tzinfo=UTC),
        "upstream_run_ids": [],
        "trigger": "schedule",
        "state": "succeeded",
        "attempt": 1,
        "due_at": None,
        "queued_at": None,
        "started_at": None,
        "finished_at": None,
        "lateness": timedelta(milliseconds=1500),
        "start_lag": None,
        "cancel_requested": False,
        "last_error": "",
        "replayed_count": 0,
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    assert list(run_rows_out([row])[0]) == list(RunOut().fields)
    sources = {field.source for field in RunOut().fields.values()}
    assert sources == set(RUN_OUT_COLUMNS)
