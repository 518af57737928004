"""Deterministic per-job jitter: spreads firings that share a time, the same way every run."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from uuid import UUID

_MICROSECOND = timedelta(microseconds=1)


def jitter_offset(job_id: UUID, max_jitter: timedelta) -> timedelta:
    """A stable offset in [0, max_jitter), at microsecond resolution; zero for a zero window."""
    if max_jitter < timedelta(0):
        raise ValueError(f"max_jitter must not be negative, got {max_jitter}")
    window = max_jitter // _MICROSECOND
    if window == 0:
        return timedelta(0)
    # blake2b, not hash(): hash() is salted per process, and every beat node must agree. The
    # personalisation keeps the offset independent of any other hash of the id (partitions).
    digest = hashlib.blake2b(job_id.bytes, digest_size=8, person=b"beat-jitter").digest()
    # A 64-bit draw modulo a window of at most days in microseconds: the bias is below 1e-7.
    return timedelta(microseconds=int.from_bytes(digest, "big") % window)


def apply_jitter(scheduled_for: datetime, job_id: UUID, max_jitter: timedelta) -> datetime:
    """When to dispatch a firing: its scheduled instant plus the job's offset, in UTC."""
    if scheduled_for.utcoffset() is None:
        raise ValueError("scheduled_for must be timezone-aware")
    # Add in UTC: adding to a zone-aware datetime moves wall time, not elapsed time.
    return scheduled_for.astimezone(UTC) + jitter_offset(job_id, max_jitter)
