"""What the admin's job form posts."""

from __future__ import annotations

from typing import Any


def form_data(tenant_id: int, **overrides: Any) -> dict[str, Any]:
    """A complete, valid cron job definition as the admin form posts it."""
    data: dict[str, Any] = {
        "tenant": tenant_id,
        "name": "nightly-report",
        "description": "",
        "kind": "cron",
        "cron_expression": "0 9 * * 1-5",
        "interval_seconds": "",
        "run_at": "",
        "timezone": "Europe/Paris",
        "target_kind": "callable",
        "target_name": "demo.heartbeat",
        "target_url": "",
        "target_headers": "",
        "payload": '{"report": "sales"}',
        "queue": "scheduler",
        "priority": 5,
        "max_attempts": 3,
        "retry_base_delay": 10,
        "retry_max_delay": 600,
        "retry_jitter": "on",
        "timeout": 300,
        "concurrency_policy": "allow",
        "catchup_policy": "skip",
        "catchup_limit": 100,
        "starting_deadline": "",
        "jitter_window": 0,
        "depends_on": "",
        "trigger_rule": "all_success",
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not None}
