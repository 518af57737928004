"""Log formats: readable text lines for development, JSON for production, same records."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

import pytest

from beat_engine.log_format import (
    JsonLineFormatter,
    TextLineFormatter,
    int_ranges,
    label_line,
    render_value,
)

CREATED = datetime(2026, 1, 1, 12, 0, 1, 234_000, tzinfo=UTC).timestamp()


def record(message: str, name: str = "beat_engine", **extra: object) -> logging.LogRecord:
    rec = logging.makeLogRecord(
        {"name": name, "msg": message, "levelname": "INFO", "levelno": logging.INFO, **extra}
    )
    rec.created = CREATED
    return rec


@pytest.mark.parametrize(
    ("values", "text"),
    [
        (range(64), "0-63"),
        ([0, 1, 2, 3, 7, 9, 10], "0-3,7,9-10"),
        ([5], "5"),
        ([9, 3, 4, 3, 1], "1,3-4,9"),
        ([], "-"),
        ([0, 2, 4], "0,2,4"),
    ],
)
def test_int_ranges(values: list[int], text: str) -> None:
    assert int_ranges(values) == text


def test_text_line_for_a_node_taking_every_partition() -> None:
    line = TextLineFormatter("beat-1").format(
        record("beat.lease.owned", node="beat-1", gained=list(range(64)), lost=[],
               owned=list(range(64)), live_nodes=1)
    )  # fmt: skip

    assert line == (
        "12:00:01.234 beat-1   INFO beat.lease.owned node=beat-1 gained=0-63 lost=- "
        "owned=0-63 live_nodes=1"
    )


def test_text_line_quotes_values_with_spaces_and_names_foreign_loggers() -> None:
    line = TextLineFormatter("worker-1").format(
        record("Task succeeded", name="celery.app.trace", error="boom: x=1", tags=["a", "b"])
    )

    assert line == (
        '12:00:01.234 worker-1 INFO celery.app.trace: Task succeeded error="boom: x=1" tags=a,b'
    )


def test_text_traceback_follows_on_indented_lines() -> None:
    try:
        raise RuntimeError("lost the lease")
    except RuntimeError:
        rec = record("beat.tick_failed", node="n1", exc_info=sys.exc_info())

    first, *rest = TextLineFormatter("beat-1").format(rec).splitlines()

    assert first.endswith("INFO beat.tick_failed node=n1")
    assert rest[0] == "    Traceback (most recent call last):"
    assert rest[-1] == "    RuntimeError: lost the lease"
    assert all(row.startswith("    ") for row in rest)


def test_text_label_falls_back_to_the_environment_then_the_process_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCHEDULER_PROCESS_NAME", "web")
    assert " web      INFO " in TextLineFormatter().format(record("x.y"))
    monkeypatch.delenv("SCHEDULER_PROCESS_NAME")
    assert " MainProcess INFO " in TextLineFormatter().format(record("x.y"))


def test_json_line_keeps_lists_whole() -> None:
    data = json.loads(
        JsonLineFormatter().format(record("beat.lease.owned", node="n1", gained=[0, 1, 2]))
    )

    assert data == {
        "ts": "2026-01-01T12:00:01.234000+00:00",
        "level": "INFO",
        "event": "beat.lease.owned",
        "node": "n1",
        "gained": [0, 1, 2],
    }


def test_render_value() -> None:
    assert render_value({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    assert render_value("") == '""'
    assert render_value(True) == "True"
    assert render_value([True, False]) == "True,False"


def test_relayed_lines_get_time_and_label_unless_already_formatted() -> None:
    at = datetime(2026, 1, 1, 12, 0, 1, 234_000, tzinfo=UTC)
    ours = "12:00:01.200 beat-1   INFO beat.claim due=3"

    assert label_line(ours, "beat-1", at=at) == ours
    assert label_line("    Traceback (most recent call last):", "beat-1", at=at).startswith("    ")
    assert label_line("[INFO] Booting worker with pid: 7", "web", at=at) == (
        "12:00:01.234 web      [INFO] Booting worker with pid: 7"
    )
