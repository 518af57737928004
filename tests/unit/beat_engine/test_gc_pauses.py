"""A long garbage-collector pause is logged, with its generation, and a short one is not."""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys

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


# In a process of its own: a freeze lasts as long as the process.
_FREEZE_PROBE = """
import gc, json
from beat_engine import gc_pauses
start_up = [[i] for i in range(10_000)]
before = len(gc.get_objects(2)) + len(gc.get_objects(1)) + len(gc.get_objects(0))
gc_pauses.freeze_start_up()
after = len(gc.get_objects(2))
later = [[i] for i in range(100)]
gc.collect()
print(json.dumps({"before": before, "frozen": gc.get_freeze_count(), "after": after,
                  "walked": len(gc.get_objects(2)), "later": len(later)}))
"""


def test_start_up_objects_are_frozen_and_later_ones_still_collected() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE], capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    # Everything alive at the freeze, the start-up's 10,000 lists among it, leaves the
    # generations a full collection walks; what is made after it is walked as before.
    assert seen["frozen"] >= 10_000
    assert seen["frozen"] >= seen["before"] - 100
    assert seen["after"] == 0
    assert 100 <= seen["walked"] < 1_000
