"""Engine outcomes and errors: fencing is a value, not an exception."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FencedOut:
    """A newer owner holds these partitions: the node must drop them and dispatch nothing."""

    partitions: frozenset[int]


class EngineError(Exception):
    """Base class of the engine's own errors."""


class EpochUnavailable(EngineError):
    """A lease was taken in Redis but PostgreSQL could not issue its epoch."""
