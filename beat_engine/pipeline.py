"""The claim pipeline's parts: a batch of due entries, and the thread that prepares batches."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from django.db import connection

from beat_engine.claims import PreparedClaim
from beat_engine.heap import DueEntry
from beat_engine.publisher import Rendered

T = TypeVar("T")

# A claim read and planned, with the messages of its queued runs rendered.
Prepared = tuple[PreparedClaim, Rendered]


@dataclass
class ClaimBatch:
    """Due entries taken off the heap for one claim, prepared now or on the preparing thread."""

    entries: list[DueEntry]
    epochs: dict[int, int]
    now: datetime
    prepared: Prepared | None = None
    future: Future[Prepared] | None = None
    # Set once the claim committed: from then on the entries are stale (the claimed jobs have
    # new next firings, already in the heap) and must never go back to it, except those of
    # ``reloading``: jobs the claim refused whose rows are not yet reloaded.
    committed: bool = False
    reloading: frozenset[UUID] = frozenset()

    def settle(self) -> Prepared:
        """The prepared claim, waiting for the preparing thread if it is still at work."""
        if self.prepared is None:
            assert self.future is not None
            self.prepared = self.future.result()
        return self.prepared

    def returnable(self) -> list[DueEntry]:
        """The entries to put back in the heap if the tick fails with this batch in hand."""
        if not self.committed:
            return self.entries
        return [e for e in self.entries if e.job_id in self.reloading]

    def wait(self) -> None:
        """Let the preparing thread finish with this batch, whatever its outcome."""
        if self.future is not None:
            futures_wait([self.future])


def _close_connection() -> None:
    # Looked up when called, on the calling thread: `connection.close` evaluated on another
    # thread would be that thread's connection.
    connection.close()


class Preparer:
    """One thread, with its own database connection, that prepares the next claim batch (and
    pushes the last one) while the engine's thread waits for a claim in PostgreSQL.

    The connection is held only while a backlog drains: an idle engine keeps one connection,
    and a test database is never left with a second session open.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._used = False

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="beat-prepare")
        self._used = True
        return self._executor

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self.executor.submit(self._closing_on_error, fn, *args)

    def release_connection(self, *, wait: bool) -> None:
        """Close the thread's connection after the work already queued. Not waited for behind
        a carried batch: the thread reconnects for the next batch (a few ms, off the engine's
        thread) rather than the tick waiting here for the preparation."""
        if self._executor is not None and self._used:
            closed = self._executor.submit(_close_connection)
            if wait:
                closed.result()
            self._used = False

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.submit(_close_connection).result()
            self._executor.shutdown()
            self._executor = None

    @staticmethod
    def _closing_on_error(fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except Exception:
            _close_connection()  # this thread's: the next batch opens a fresh one
            raise
