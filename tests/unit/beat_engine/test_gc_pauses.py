"""A long garbage-collector pause is logged, with its generation, and a short one is not."""

from __future__ import annotations

import gc
import logging

import pytest

from beat_engine import gc_pauses


@pytest.fixture
def installed():  # type: ignore[no-untyped-def]
    # Automatic collections off: only the test's own collect(2) runs meanwhile.
    gc.disable()
    gc_pauses.install()
    yield
    gc.callbacks.remove(gc_pauses._on_gc)
    gc.enable()


def _pauses(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "beat.gc_pause"]


def test_a_pause_of_at_least_the_threshold_is_logged_with_its_generation(
    installed, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_pauses, "GC_PAUSE_LOG_S", 0.0)
    with caplog.at_level(logging.INFO, logger="beat_engine"):
        gc.collect(2)
    pauses = _pauses(caplog)
    assert [r.generation for r in pauses] == [2]  # type: ignore[attr-defined]
    assert pauses[0].seconds >= 0  # type: ignore[attr-defined]


def test_a_pause_under_the_threshold_is_not_logged(
    installed, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_pauses, "GC_PAUSE_LOG_S", 3600.0)
    with caplog.at_level(logging.INFO, logger="beat_engine"):
        gc.collect(2)
    assert _pauses(caplog) == []


def test_installing_twice_adds_the_callback_once(installed) -> None:  # type: ignore[no-untyped-def]
    gc_pauses.install()
    assert gc.callbacks.count(gc_pauses._on_gc) == 1
