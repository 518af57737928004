"""The background writer of attempt results: batches, bounds, and a failed write."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from jobs.result_writer import ResultWriter
from jobs.services.run_results import AttemptResult

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(attempt: int = 1) -> AttemptResult:
    return AttemptResult(
        run_id=uuid.uuid4(), attempt=attempt, job_id=uuid.uuid4(), target="t", status="SUCCESS",
        result=None, error="", traceback="", worker="w", started_at=AT, finished_at=AT,
    )  # fmt: skip


class Sink:
    def __init__(self, fail_first: int = 0) -> None:
        self.batches: list[list[AttemptResult]] = []
        self.fail_first = fail_first
        self.called = threading.Event()

    def __call__(self, entries: Sequence[AttemptResult]) -> None:
        self.called.set()
        if self.fail_first:
            self.fail_first -= 1
            raise RuntimeError("database unreachable")
        self.batches.append(list(entries))


def test_everything_is_written_in_submission_order_in_bounded_batches() -> None:
    sink = Sink()
    writer = ResultWriter(sink, flush_s=3600, batch=200)
    entries = [_entry() for _ in range(450)]
    for entry in entries:
        writer.submit(entry)
    writer.flush()
    # A full batch wakes the thread early, so how they split depends on timing; never past 200.
    assert max(len(batch) for batch in sink.batches) <= 200
    assert [e for batch in sink.batches for e in batch] == entries


def test_the_thread_writes_without_being_asked() -> None:
    sink = Sink()
    writer = ResultWriter(sink, flush_s=0.01, batch=200)
    entry = _entry()
    writer.submit(entry)
    assert sink.called.wait(10)
    writer.flush()
    assert [e for batch in sink.batches for e in batch] == [entry]


def test_an_idle_thread_ends_and_the_next_submit_starts_another() -> None:
    sink = Sink()
    writer = ResultWriter(sink, flush_s=0.01)
    writer.submit(_entry())
    assert sink.called.wait(10)
    thread = writer._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    assert writer._thread is None
    sink.called.clear()
    later = _entry()
    writer.submit(later)
    assert sink.called.wait(10)
    writer.stop()
    assert sink.batches[-1] == [later]


def test_pending_entries_are_bounded() -> None:
    sink = Sink()
    writer = ResultWriter(sink, flush_s=3600, batch=1000, max_pending=3)
    for _ in range(5):
        writer.submit(_entry())
    writer.flush()
    assert sum(len(batch) for batch in sink.batches) == 3
    assert writer.dropped == 2


def test_a_failed_write_is_logged_and_the_next_batch_still_goes(caplog) -> None:  # type: ignore[no-untyped-def]
    sink = Sink(fail_first=1)
    writer = ResultWriter(sink, flush_s=3600, batch=2)
    lost, kept = [_entry(), _entry()], [_entry()]
    for entry in lost + kept:
        writer.submit(entry)
    writer.flush()
    assert sink.batches == [kept]
    assert "execution.result.not_stored" in caplog.text
