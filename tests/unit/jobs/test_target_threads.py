"""Target threads are reused across runs, yet a stuck target never holds up the next run."""

from __future__ import annotations

import threading
from collections.abc import Callable

from jobs.outcomes import ResultKind, TargetResult
from jobs.target_threads import TargetThreads

WAIT_S = 10.0


def _thread_name_result() -> TargetResult:
    return TargetResult(ResultKind.SUCCESS, threading.get_ident())


def _wait(threads: TargetThreads, invoke: Callable[[], TargetResult]) -> TargetResult:
    pending = threads.submit(invoke)
    assert pending.done.wait(WAIT_S)
    assert pending.result is not None
    return pending.result


def _until_idle(threads: TargetThreads, idle: int) -> None:
    # A thread counts itself idle just after it sets ``done``; give it that instant.
    for _ in range(1000):
        if threads._idle == idle:
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"expected {idle} idle threads, have {threads._idle}")


def test_consecutive_runs_reuse_one_thread() -> None:
    threads = TargetThreads()

    first = _wait(threads, _thread_name_result)
    _until_idle(threads, 1)
    second = _wait(threads, _thread_name_result)

    assert first.result == second.result


def test_a_stuck_target_does_not_delay_the_next_run() -> None:
    threads = TargetThreads()
    release = threading.Event()

    def stuck() -> TargetResult:
        release.wait(WAIT_S)
        return TargetResult(ResultKind.SUCCESS, "late")

    abandoned = threads.submit(stuck)
    try:
        assert _wait(threads, _thread_name_result).kind == ResultKind.SUCCESS
        assert not abandoned.done.is_set()
    finally:
        release.set()
    assert abandoned.done.wait(WAIT_S)


def test_threads_beyond_the_idle_limit_exit() -> None:
    threads = TargetThreads(max_idle=1, name="test-idle-limit")
    release = threading.Event()

    def held() -> TargetResult:
        release.wait(WAIT_S)
        return TargetResult(ResultKind.SUCCESS)

    pending = [threads.submit(held) for _ in range(3)]
    assert _alive("test-idle-limit") == 3
    release.set()
    for each in pending:
        assert each.done.wait(WAIT_S)

    for _ in range(1000):
        if _alive("test-idle-limit") == 1:
            break
        threading.Event().wait(0.005)
    assert _alive("test-idle-limit") == 1
    _until_idle(threads, 1)


def _alive(name: str) -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == name)


def test_an_exception_in_the_target_is_an_outcome_not_a_dead_thread() -> None:
    threads = TargetThreads()

    def boom() -> TargetResult:
        raise ValueError("bad payload")

    result = _wait(threads, boom)
    _until_idle(threads, 1)

    assert (result.kind, result.error) == (ResultKind.RETRYABLE, "ValueError: bad payload")
    assert _wait(threads, _thread_name_result).kind == ResultKind.SUCCESS


def test_abandoned_targets_are_counted_until_they_return() -> None:
    threads = TargetThreads()
    releases = [threading.Event(), threading.Event()]

    def stuck(release: threading.Event) -> Callable[[], TargetResult]:
        def invoke() -> TargetResult:
            release.wait(WAIT_S)
            return TargetResult(ResultKind.SUCCESS, "late")

        return invoke

    first, second = (threads.submit(stuck(release)) for release in releases)
    try:
        assert threads.abandon(first) == 1
        # Giving up on the same target twice counts it once.
        assert threads.abandon(first) == 1
        assert threads.abandon(second) == 2
        releases[0].set()
        assert first.done.wait(WAIT_S)
        _until_abandoned(threads, 1)
    finally:
        for release in releases:
            release.set()
    assert second.done.wait(WAIT_S)
    _until_abandoned(threads, 0)


def test_a_target_that_already_returned_is_not_counted_as_abandoned() -> None:
    threads = TargetThreads()
    pending = threads.submit(_thread_name_result)
    assert pending.done.wait(WAIT_S)
    _until_idle(threads, 1)
    assert threads.abandon(pending) == 0
    assert threads.abandoned == 0


def _until_abandoned(threads: TargetThreads, count: int) -> None:
    # The count drops just after ``done`` is set, in the same step that idles the thread.
    for _ in range(1000):
        if threads.abandoned == count:
            return
        threading.Event().wait(0.005)
    raise AssertionError(f"expected {count} abandoned targets, have {threads.abandoned}")
