"""An API client for failover scenarios, run as its own process against DATABASE_URL.

``python -m tests.support.pg_failover_client OUT TARGET_URL JOBS`` creates a tenant and JOBS
interval jobs (every second, HTTP target), then creates a one-off job every 0.25 s through the
whole web stack (Django's test client: middleware, DRF, the services) until the file OUT.stop
exists. Every answer is written to OUT as one JSON line, flushed at once, so the test knows
exactly which jobs were accepted (201) and what the web answered while no primary was
reachable.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

CREATE_EVERY_S = 0.25
ONE_OFF_DELAY_S = 2.0


def _job(name: str, target_url: str, **schedule: Any) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"kind": "http", "url": target_url},
        "retries": {"max_attempts": 10, "base_delay_sec": 1, "max_delay_sec": 2},
        # Every firing a failover delayed is replayed: the test counts all of them.
        "catchup": {"policy": "replay_all", "limit": 1000},
        "timeout_sec": 10,
        **schedule,
    }


def main(out: Path, target_url: str, jobs: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    import django

    django.setup()
    from django.test import Client

    from beat_engine.clock import SystemClock
    from jobs.services.tenants import api_key_create, tenant_create

    clock = SystemClock()
    tenant = tenant_create(name="failover", now=clock.now())
    _, key = api_key_create(tenant=tenant, name="failover", now=clock.now())
    client = Client(raise_request_exception=False)
    headers = {"Authorization": f"Bearer {key}"}
    stop = out.with_suffix(".stop")
    with out.open("a") as log:

        def post(kind: str, body: dict[str, Any]) -> None:
            response = client.post(
                "/v1/jobs", json.dumps(body), content_type="application/json", headers=headers
            )
            job_id = response.json().get("job_id") if response.status_code == 201 else None
            entry = {
                "kind": kind, "status": response.status_code, "job_id": job_id,
                "retry_after": response.get("Retry-After"), "at": clock.now().isoformat(),
            }  # fmt: skip
            log.write(json.dumps(entry) + "\n")
            log.flush()

        for index in range(jobs):
            post("interval", _job(f"every-second-{index}", target_url, interval_sec=1))
        count = 0
        while not stop.exists():
            run_at = clock.now() + timedelta(seconds=ONE_OFF_DELAY_S)
            post("one_off", _job(f"once-{count}", target_url, run_at=run_at.isoformat()))
            count += 1
            time.sleep(CREATE_EVERY_S)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
