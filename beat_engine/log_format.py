"""Log line formats: JSON objects for production, one readable line per event for development.

Both render the same records: an event name as the message (``beat.claim``) and its fields
passed as ``extra=``. SCHEDULER_LOG_FORMAT (scheduler_project/settings.py) picks one.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else came from ``extra=`` and is printed.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Loggers whose messages are event names; any other logger's name is printed before its text.
_EVENT_LOGGERS = ("beat_engine", "jobs", "scheduler_project")
PROCESS_NAME_ENV = "SCHEDULER_PROCESS_NAME"
_LABEL_WIDTH = 8


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


def int_ranges(values: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 7, 9, 10]`` -> ``"0-3,7,9-10"``: a partition set in a few characters."""
    ordered = sorted(set(values))
    if not ordered:
        return "-"
    spans: list[str] = []
    start = previous = ordered[0]
    for value in ordered[1:]:
        if value != previous + 1:
            spans.append(_span(start, previous))
            start = value
        previous = value
    spans.append(_span(start, previous))
    return ",".join(spans)


def _span(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def _is_int_list(value: Any) -> bool:
    return (
        isinstance(value, list | tuple | set | frozenset)
        and bool(value)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


def render_value(value: Any) -> str:
    """One field value as text: integer collections as ranges, odd strings quoted."""
    if _is_int_list(value):
        return int_ranges(value)
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(render_value(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str, sort_keys=True)
    text = str(value)
    if not text or any(ch.isspace() or ch in '="' for ch in text):
        return json.dumps(text)
    return text


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: event name plus the ``extra`` fields, for machines and tests."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "event": record.getMessage(),
        }
        if not record.name.startswith(_EVENT_LOGGERS):
            data["logger"] = record.name
        data.update(extra_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextLineFormatter(logging.Formatter):
    """``12:00:01.234 beat-1   INFO beat.lease.owned node=beat-1 gained=0-63 owned=0-63``.

    The time is UTC, as every stored instant. The process label comes from
    SCHEDULER_PROCESS_NAME (scripts/run names each process it starts), else the process's own
    name. A traceback follows on indented lines, so one event still starts one line.
    """

    def __init__(self, process_name: str | None = None) -> None:
        super().__init__()
        self.process_name = process_name or os.environ.get(PROCESS_NAME_ENV, "")

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        label = self.process_name or record.processName or "-"
        message = record.getMessage()
        if not record.name.startswith(_EVENT_LOGGERS):
            message = f"{record.name}: {message}"
        parts = [stamp, label.ljust(_LABEL_WIDTH), record.levelname, message]
        parts.extend(f"{k}={render_value(v)}" for k, v in extra_fields(record).items())
        line = " ".join(parts)
        if record.exc_info:
            trace = self.formatException(record.exc_info)
            line += "\n" + "\n".join(f"    {row}" for row in trace.splitlines())
        return line


_TEXT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} ")


def label_line(line: str, label: str, *, at: datetime) -> str:
    """A process's raw output line in the text format's shape (scripts/run relays them).

    Lines the text formatter wrote, and the indented lines of its tracebacks, pass unchanged;
    anything else (a server's own log line, Celery's banner) gets the time and the label.
    """
    if _TEXT_LINE.match(line) or line[:1].isspace() or not line.strip():
        return line
    stamp = at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]
    return f"{stamp} {label.ljust(_LABEL_WIDTH)} {line}"
