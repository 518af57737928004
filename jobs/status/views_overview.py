"""/status/: the last hour at a glance, for the tenant in scope (or all, for superusers)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse

from beat_engine.config import broker_redis_url
from beat_engine.db_clock import read_database_clock
from jobs.notify import redis_client
from jobs.status import charts, limits_data, target_limits_data
from jobs.status import overview_data as data
from jobs.status.access import Scope, render_page, status_view
from jobs.status.nodes import ownership, partition_ranges
from jobs.status.queues import queue_depths
from scheduler_project.redis_urls import redis_from_url


@lru_cache(maxsize=1)
def broker_client() -> redis.Redis[bytes]:
    return redis_from_url(broker_redis_url(settings.CELERY_BROKER_URL), socket_timeout=5)


def _engine_panels() -> dict[str, Any]:
    """Beat nodes and queue depth: shared by every tenant, so shown to superusers only."""
    sched = settings.SCHEDULER
    panels: dict[str, Any] = {"engine_error": "", "queue_error": ""}
    try:
        owned = ownership(
            redis_client(), partitions=int(sched["PARTITIONS"]),
            lease_ttl_s=float(sched["LEASE_TTL_S"]),
        )  # fmt: skip
        panels["ownership"] = owned
        panels["nodes"] = [(n, partition_ranges(n.partitions)) for n in owned.nodes]
        panels["live_nodes"] = sum(1 for n in owned.nodes if n.live)
        panels["unowned"] = partition_ranges(owned.unowned)
        panels["in_handover"] = partition_ranges(owned.in_handover)
    except redis.RedisError as exc:
        panels["engine_error"] = f"Redis unreachable: {exc}"
    try:
        named = [settings.CELERY_TASK_DEFAULT_QUEUE, str(sched["DEAD_LETTER_QUEUE"])]
        panels["queues"] = queue_depths(broker_client(), named=named)
    except redis.RedisError as exc:
        panels["queue_error"] = f"broker unreachable: {exc}"
    return panels


@status_view
def overview(request: HttpRequest, scope: Scope) -> HttpResponse:
    window = data.Window.ending(read_database_clock())
    tenant_id = scope.tenant_id
    figures = data.bounded(lambda: data.firings_and_lateness(window, tenant_id=tenant_id))
    retries = data.bounded(lambda: data.retries_per_minute(window, tenant_id=tenant_id))
    dead = data.bounded(lambda: data.dead_letters_per_minute(window, tenant_id=tenant_id))
    context: dict[str, Any] = {
        "window": window,
        "firings_chart": charts.firings_chart(window, figures),
        "publish_lag_chart": charts.lag_chart(window, figures, kind="publish"),
        "start_lag_chart": charts.lag_chart(window, figures, kind="start"),
        "retries_chart": charts.retries_chart(window, retries, dead),
        "states": data.bounded(lambda: data.runs_by_state(window, tenant_id=tenant_id)),
        "failures": data.bounded(lambda: data.latest_failures(window, tenant_id=tenant_id)),
        "running_limits": data.bounded(lambda: limits_data.running_limits(tenant_id=tenant_id)),
        "target_limits": data.bounded(
            lambda: target_limits_data.target_limits(tenant_id=tenant_id, now=window.now)
        ),
        "show_engine": scope.can_choose,
    }
    if scope.can_choose:
        context.update(_engine_panels())
    return render_page(request, scope, "status/overview.html", context)
