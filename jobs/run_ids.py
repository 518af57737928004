"""Run ids that carry their firing's instant, so that a run's id names its history partition.

A run id is a UUID in the version 7 layout (RFC 9562): the leading 48 bits are the Unix time
in milliseconds of the run's ``scheduled_for`` (not of its creation), then the version (7), 74
random bits and the variant. UUIDs compare as unsigned 128-bit numbers (Python) and bytewise
(PostgreSQL), both the same order, so every run of one UTC day of ``scheduled_for`` has an id in
one contiguous range, ``[day_floor, next_day_floor)``, and that range is the day's partition of
``jobs_jobrun`` and ``jobs_runattempt`` (docs/history.md, "Partitions"). An id alone thus
finds its partition, and the unique firing key stays per partition (docs/architecture.md,
Invariants).

Instants before 1970 get the prefix 0 and instants past the 48-bit range (year 10889) its
maximum: their runs live in the default partitions, whose unique index covers them.

``RUN_ID_FUNCTIONS_SQL`` is the same function in SQL, for PL/pgSQL and raw statements; a
property test holds the two to the same bits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from uuid import UUID

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_MAX_MS = (1 << 48) - 1
_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62
# The 74 random bits: 12 after the version nibble, 62 after the variant.
_RANDOM_HIGH = ((1 << 12) - 1) << 64
_RANDOM_LOW = (1 << 62) - 1
_RANDOM = _RANDOM_HIGH | _RANDOM_LOW


def instant_ms(instant: datetime) -> int:
    """Unix milliseconds of ``instant`` (floored), clamped to the 48 bits of the prefix."""
    if instant.tzinfo is None:
        raise ValueError("a run's instant must be timezone-aware")
    return min(max((instant - _EPOCH) // _MS, 0), _MAX_MS)


def run_id_for(instant: datetime, randbytes: Callable[[int], bytes] = os.urandom) -> UUID:
    """A new run id for a firing at ``instant``: the instant's prefix, then random bits."""
    rand = int.from_bytes(randbytes(10), "big")
    return UUID(int=(instant_ms(instant) << 80) | _VERSION | _VARIANT | (rand & _RANDOM))


def run_id_floor(instant: datetime) -> UUID:
    """The smallest id any run at or after ``instant`` (its millisecond) can have."""
    return UUID(int=instant_ms(instant) << 80)


def run_id_ceil(instant: datetime) -> UUID:
    """The largest id a run at ``instant`` (its millisecond) can have: with run_id_floor, the
    range a lookup by firing adds to prune to the firing's partition."""
    return UUID(int=(instant_ms(instant) << 80) | ((1 << 80) - 1))


def run_id_ms(run_id: UUID) -> int:
    """The millisecond prefix of a run id."""
    return run_id.int >> 80


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def day_id_range(day: date) -> tuple[UUID, UUID]:
    """``[low, high)``: the ids of the runs whose ``scheduled_for`` falls on ``day`` (UTC)."""
    start = day_start(day)
    return run_id_floor(start), run_id_floor(start + timedelta(days=1))


def run_id_day(run_id: UUID) -> date:
    """The UTC day of ``scheduled_for`` a run id belongs to."""
    return (_EPOCH + timedelta(milliseconds=run_id_ms(run_id))).date()


def run_id_ms_sql(instant: str) -> str:
    """SQL for the Unix millisecond of ``instant`` (an SQL expression of type timestamptz),
    floored and clamped to the 48 bits of the prefix as ``instant_ms`` does: a bigint.

    Built of strict, immutable built-in functions only: ``extract`` from a timestamptz is
    STABLE; from the same instant at time zone 'UTC', a timestamp, it is immutable and gives the
    same epoch whatever the session's TimeZone. The body of jobs_run_id_ms below, and the
    run_id_matches_firing CHECK's (jobs/run_partitions.py) through run_id_prefix_sql."""
    return (
        "numeric_smaller(numeric_larger("
        f"floor(extract(epoch FROM {instant} AT TIME ZONE 'UTC') * 1000), 0), "
        "281474976710655)::bigint"
    )


def run_id_prefix_sql(instant: str) -> str:
    """SQL for the 6-byte prefix (bytea) of the ids of runs at ``instant``.

    With no function of ours in it, so that PostgreSQL has no function body to read and inline
    where it appears: the run_id_matches_firing CHECK (jobs/run_partitions.py), prepared anew
    in every statement that writes a run."""
    return f"substring(int8send({run_id_ms_sql(instant)}) FROM 3)"


# The SQL twin of the functions above (migration 0012 installs it, 0015 the current bodies of
# the first three). jobs_run_id_floor and jobs_run_id_ceil are IMMUTABLE, so that a condition
# `id >= jobs_run_id_floor($1)` prunes partitions when the statement runs; jobs_run_id draws its
# random bits from gen_random_uuid() (PostgreSQL 13+).
#
# The three are inlined where they are called: built only of strict, immutable functions
# (LEAST and GREATEST are not strict, and would keep a function from being inlined and have its
# body parsed and planned when first called in each statement). And their bodies are
# SQL-standard (RETURN ...), stored parsed: inlining a body given as text parses it again each
# time. Inlining still reads each body's stored tree at every statement that is planned, so the
# CHECK that runs in every write of a run calls none of them (jobs/run_partitions.py).
RUN_ID_BOUNDS_SQL = f"""
CREATE OR REPLACE FUNCTION jobs_run_id_ms(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN {run_id_ms_sql("t")};
CREATE OR REPLACE FUNCTION jobs_run_id_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN encode(substring(int8send(jobs_run_id_ms(t)) FROM 3)
              || '\\x00000000000000000000'::bytea, 'hex')::uuid;
CREATE OR REPLACE FUNCTION jobs_run_id_ceil(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN encode(substring(int8send(jobs_run_id_ms(t)) FROM 3)
              || '\\xffffffffffffffffffff'::bytea, 'hex')::uuid;
"""
RUN_ID_FUNCTIONS_SQL = (
    RUN_ID_BOUNDS_SQL
    + """
CREATE OR REPLACE FUNCTION jobs_run_id(t timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE STRICT PARALLEL SAFE AS $$
    SELECT encode(substring(int8send(jobs_run_id_ms(t)) FROM 3)
                  || set_byte(substring(r FROM 7), 0, (get_byte(r, 6) & 15) | 112), 'hex')::uuid
      FROM (SELECT uuid_send(gen_random_uuid()) AS r) AS g
$$;
"""
)

DROP_RUN_ID_FUNCTIONS_SQL = """
DROP FUNCTION IF EXISTS jobs_run_id(timestamptz);
DROP FUNCTION IF EXISTS jobs_run_id_floor(timestamptz);
DROP FUNCTION IF EXISTS jobs_run_id_ceil(timestamptz);
DROP FUNCTION IF EXISTS jobs_run_id_ms(timestamptz);
"""
