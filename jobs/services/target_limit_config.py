"""Configuring per-target rate limits: a tenant's TargetLimit rows and a job's own fields
(docs/limits.md, "Per-target rate limits"). Every bad value is an InvalidInput naming its field;
nothing is written then."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from jobs.errors import InvalidInput
from jobs.models import Tenant
from jobs.models_target_limits import EVERY_HOST, TargetLimit

MAX_RATE_PER_S = 100_000.0
MAX_BURST = 1_000_000
# A tenant's rows are read whole by every worker process (jobs/target_limits.py): few, bounded.
MAX_TARGET_LIMITS_PER_TENANT = 200


def validate_target(field: str, value: Any, *, wildcard: bool) -> str:
    """A host or group name, lower case: what runs are matched on (case does not matter)."""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be a string")
    name = value.strip().lower()
    if not name:
        raise InvalidInput(field, "must not be empty")
    if len(name) > 255:
        raise InvalidInput(field, "must be at most 255 characters")
    if any(ch.isspace() or not ch.isprintable() for ch in name):
        raise InvalidInput(field, "must not contain spaces or control characters")
    if name == EVERY_HOST and not wildcard:
        raise InvalidInput(field, f"{EVERY_HOST!r} is reserved for a tenant's every-host limit")
    if EVERY_HOST in name and name != EVERY_HOST:
        raise InvalidInput(field, f"{EVERY_HOST!r} may only stand alone, for every host")
    return name


def validate_rate(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(field, "must be a number of requests per second")
    rate = float(value)
    if not math.isfinite(rate) or not 0 < rate <= MAX_RATE_PER_S:
        raise InvalidInput(field, f"must be more than 0 and at most {MAX_RATE_PER_S:g}")
    return rate


def validate_burst(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be a whole number")
    if not 1 <= value <= MAX_BURST:
        raise InvalidInput(field, f"must be between 1 and {MAX_BURST}")
    return value


def validate_job_rate_limit(group: str, rate: float | None, burst: int | None) -> str:
    """A job's group ('' for its HTTP host), own rate and burst; returns the group as stored."""
    name = validate_target("rate_limit.group", group, wildcard=False) if group else ""
    if rate is not None:
        validate_rate("rate_limit.rate_per_s", rate)
    if burst is not None:
        if rate is None:
            raise InvalidInput(
                "rate_limit.burst", "needs rate_per_s: a burst belongs to the job's own rate"
            )
        validate_burst("rate_limit.burst", burst)
    return name


def target_limits_of(tenant: Tenant) -> QuerySet[TargetLimit]:
    return TargetLimit.objects.filter(tenant=tenant).order_by("target")


def target_limit_create(
    *, tenant: Tenant, target: Any, rate_per_s: Any, burst: Any, now: datetime
) -> TargetLimit:
    limit = TargetLimit(
        tenant=tenant,
        target=validate_target("target", target, wildcard=True),
        rate_per_s=validate_rate("rate_per_s", rate_per_s),
        burst=validate_burst("burst", 1 if burst is None else burst),
        created_at=now,
        updated_at=now,
    )
    with transaction.atomic():
        # The tenant's row locked: two concurrent creates cannot both pass the count.
        Tenant.objects.select_for_update(no_key=True).filter(id=tenant.id).exists()
        if TargetLimit.objects.filter(tenant=tenant).count() >= MAX_TARGET_LIMITS_PER_TENANT:
            raise InvalidInput(
                "target", f"a tenant has at most {MAX_TARGET_LIMITS_PER_TENANT} target limits"
            )
        try:
            with transaction.atomic():
                limit.save(force_insert=True)
        except IntegrityError:
            raise InvalidInput("target", f"a limit for {limit.target!r} already exists") from None
    return limit


def target_limit_update(
    *, limit: TargetLimit, changes: Mapping[str, Any], now: datetime
) -> TargetLimit:
    if "rate_per_s" in changes:
        limit.rate_per_s = validate_rate("rate_per_s", changes["rate_per_s"])
    if "burst" in changes:
        limit.burst = validate_burst("burst", changes["burst"])
    limit.updated_at = now
    limit.save(update_fields=["rate_per_s", "burst", "updated_at"])
    return limit


def target_limit_delete(*, limit: TargetLimit) -> None:
    limit.delete()
