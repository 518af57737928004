"""API benchmark: job creations/s (one by one and bulk), and run-history latency at 1M runs.

    .venv/bin/python bench/bench_api.py [--single 500] [--bulk-jobs 100000] [--runs 1000000]

Starts embedded PostgreSQL and Redis under .local/bench_api unless DATABASE_URL and REDIS_URL
are set. Prints figures and the EXPLAIN plan of the run-history query; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.docs_section import replace_section  # noqa: E402


def _setup(services_dir: Path) -> Any:
    from scheduler_project.embedded import EmbeddedServices

    embedded = None
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        embedded = EmbeddedServices(services_dir)
        os.environ.update(embedded.start())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    # The bench measures the API, not the throttle.
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert isinstance(rates, dict)
    rates["tenant"] = ""
    call_command("migrate", "--noinput", verbosity=0)
    return embedded


def _body(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "schedule": "*/5 * * * *",
        "timezone": "Europe/Paris",
        "target": {"kind": "callable", "name": "demo.heartbeat"},
        "payload": {"n": name},
    }


def bench_single(client: Any, headers: dict[str, str], count: int, tag: str) -> float:
    start = time.perf_counter()
    for i in range(count):
        response = client.post(
            "/v1/jobs", json.dumps(_body(f"{tag}-one-{i}")), "application/json", headers=headers
        )
        assert response.status_code == 201, response.content
    return count / (time.perf_counter() - start)


def bench_bulk(client: Any, headers: dict[str, str], count: int, tag: str) -> float:
    start = time.perf_counter()
    for offset in range(0, count, 1000):
        jobs = [_body(f"{tag}-bulk-{i}") for i in range(offset, min(offset + 1000, count))]
        response = client.post(
            "/v1/jobs/bulk", json.dumps({"jobs": jobs}), "application/json", headers=headers
        )
        assert response.status_code == 201, response.content[:500]
        if offset and offset % 100_000 == 0:
            print(f"   ... {offset} jobs", flush=True)
    return time.perf_counter() - start


def fill_runs(job: Any, count: int) -> float:
    from django.db import connection

    start = time.perf_counter()
    with connection.cursor() as cursor:
        # One INSERT ... SELECT: a million rows in seconds, one firing per minute back in time.
        cursor.execute(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                state, attempt, epoch, dedup_key, worker, cancel_requested, last_error,
                replayed_count, created_at, finished_at)
            SELECT jobs_run_id(%s - make_interval(mins => g)), %s, %s, %s,
                %s - make_interval(mins => g), 'schedule',
                (ARRAY['succeeded','failed','skipped'])[1 + g %% 3], 1, 1, md5(g::text), '',
                false, '', 0, %s, %s
            FROM generate_series(1, %s) AS g
            """,
            [
                job.created_at,
                job.id,
                job.tenant_id,
                job.partition,
                job.created_at,
                job.created_at,
                job.created_at,
                count,
            ],
        )
        cursor.execute("ANALYZE jobs_jobrun")
    return time.perf_counter() - start


def bench_history(
    client: Any, headers: dict[str, str], job_id: str, repeat: int
) -> dict[str, float]:
    def timed(url: str) -> tuple[float, Any]:
        start = time.perf_counter()
        response = client.get(url, headers=headers)
        assert response.status_code == 200, response.content[:300]
        return (time.perf_counter() - start) * 1000, response.json()

    first_ms, deep_ms = [], []
    url = f"/v1/jobs/{job_id}/runs?limit=20"
    _, page = timed(url)
    for _ in range(200):  # walk 4,000 runs deep, then measure a page from there
        _, page = timed(page["next"])
    deep_url = page["next"]
    for _ in range(repeat):
        first_ms.append(timed(url)[0])
        deep_ms.append(timed(deep_url)[0])
    q = statistics.quantiles
    return {
        "first_p50": statistics.median(first_ms),
        "first_p95": q(first_ms, n=20)[18],
        "deep_p50": statistics.median(deep_ms),
        "deep_p95": q(deep_ms, n=20)[18],
    }


def explain(tenant: Any, job_id: str) -> str:
    from jobs import selectors
    from jobs.api.serializers_runs import RUN_OUT_COLUMNS

    runs = selectors.run_list(
        tenant=tenant, job_id=uuid.UUID(job_id), columns=RUN_OUT_COLUMNS
    ).order_by("-scheduled_for")[:21]
    return str(runs.explain(analyze=True))


def _section(
    args: argparse.Namespace,
    command: str,
    single: float,
    bulk_s: float,
    figures: dict[str, float],
    plan: str,
    day: str,
) -> str:
    bulk_rate = args.bulk_jobs / bulk_s
    rows = [
        ("`POST /v1/jobs`, one request per job", f"{single:,.0f} jobs/s"),
        (
            "`POST /v1/jobs/bulk`, 1,000 jobs per request",
            f"{bulk_rate:,.0f} jobs/s ({args.bulk_jobs:,} in {bulk_s:.1f} s)",
        ),
        (
            f"`GET /v1/jobs/{{id}}/runs?limit=20`, {args.runs:,} runs of one job, first page",
            f"p50 {figures['first_p50']:.1f} ms, p95 {figures['first_p95']:.1f} ms",
        ),
        (
            "same, page 200 (keyset cursor)",
            f"p50 {figures['deep_p50']:.1f} ms, p95 {figures['deep_p95']:.1f} ms",
        ),
    ]
    table = "\n".join(f"| {what} | {figure} |" for what, figure in rows)
    return f"""## REST API

Measured {day} with `.venv/bin/python {command}`: Django test client in-process (no HTTP
server, no network), embedded PostgreSQL and Redis on Unix sockets, 2 shared cores,
throttling off. Regenerated by the command; not edited by hand.

| what | figure |
| --- | ---: |
{table}

Every create, single or bulk, goes through the same validation (including SSRF resolution
for HTTP targets). Pages are keyset (`scheduled_for < cursor`), not OFFSET, so a deep page
reads as few rows as the first. The page query's plan:

```
{plan}
```
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--single", type=int, default=500)
    parser.add_argument("--bulk-jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    embedded = _setup(ROOT / ".local" / "bench_api")
    try:
        from django.test import Client

        from beat_engine.clock import SystemClock
        from jobs.models import Job, JobRun
        from jobs.services.tenants import api_key_create, tenant_create

        now = SystemClock().now()
        tag = now.strftime("%Y%m%d%H%M%S")
        tenant = tenant_create(name=f"bench-{tag}", now=now)
        _, key = api_key_create(tenant=tenant, name="bench", now=now)
        headers = {"Authorization": f"Bearer {key}"}
        client = Client()

        single = bench_single(client, headers, args.single, tag)
        print(f"POST /v1/jobs, one by one: {single:,.0f} jobs/s ({args.single} jobs)")
        bulk_s = bench_bulk(client, headers, args.bulk_jobs, tag)
        print(
            f"POST /v1/jobs/bulk (1,000 per request): {args.bulk_jobs:,} jobs in {bulk_s:,.1f} s "
            f"= {args.bulk_jobs / bulk_s:,.0f} jobs/s"
        )
        job = Job.objects.filter(tenant=tenant).order_by("created_at").first()
        assert job is not None
        fill_s = fill_runs(job, args.runs)
        total = JobRun.objects.count()
        print(f"inserted {args.runs:,} runs for one job in {fill_s:.1f} s; {total:,} runs in table")
        figures = bench_history(client, headers, str(job.id), args.repeat)
        print(
            "GET /v1/jobs/{id}/runs?limit=20: "
            f"first page p50 {figures['first_p50']:.1f} ms, p95 {figures['first_p95']:.1f} ms; "
            f"page 200 p50 {figures['deep_p50']:.1f} ms, p95 {figures['deep_p95']:.1f} ms"
        )
        plan = explain(tenant, str(job.id))
        print("EXPLAIN ANALYZE of the page query:")
        print(plan)
        command = "bench/bench_api.py " + " ".join(sys.argv[1:])
        replace_section(
            "REST API",
            _section(args, command, single, bulk_s, figures, plan, now.date().isoformat()),
        )
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
