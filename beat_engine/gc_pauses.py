"""Logs the garbage collector's long pauses on a node, and keeps its start-up objects out of
them.

A full collection walks every live object: with a horizon and armed runs in memory, one such
pass holds the whole loop up (every firing due meanwhile is late by it). A pause of at least
``GC_PAUSE_LOG_S`` is logged as ``beat.gc_pause``, so that a lateness outlier can be told
apart from a slow claim or push.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import Any

logger = logging.getLogger("beat_engine")

GC_PAUSE_LOG_S = 0.05

_started: list[float] = []


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
        return
    if not _started:
        return
    took = time.perf_counter() - _started.pop()
    if took >= GC_PAUSE_LOG_S:
        logger.info(
            "beat.gc_pause",
            extra={
                "generation": info.get("generation"),
                "seconds": round(took, 3),
                "collected": info.get("collected"),
            },
        )


def install() -> None:
    """Idempotent: the callback is added once per process."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def freeze_start_up() -> None:
    """Move every object alive now (modules, Django's settings and models, the node's own
    set-up) to the collector's permanent generation, which no collection walks.

    Called once, when the node has started and before its loop: those objects live as long as
    the process, and a full collection walked them all again every time, for nothing.
    """
    gc.collect()
    gc.freeze()
