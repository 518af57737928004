"""Demo client code: a callable target the demo cron job runs every minute."""

from __future__ import annotations

import logging
from typing import Any

from jobs.registry import register_callable

logger = logging.getLogger(__name__)


@register_callable("demo.heartbeat")
def heartbeat(context: Any) -> dict[str, Any]:
    logger.info(
        "demo.heartbeat", extra={"scheduled_for": str(getattr(context, "scheduled_for", ""))}
    )
    return {"ok": True}
