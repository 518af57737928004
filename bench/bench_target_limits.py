"""Per-target rate limits: what the check costs a run, limited or not.

Run manually (not in CI):  .venv/bin/python bench/bench_target_limits.py [--takes 5000]
Uses DATABASE_URL/REDIS_URL when both are set, else starts embedded servers in
.local/bench-target-limits. Prints, and writes nothing:

- the bucket lookup of a run whose tenant has no limit (jobs.target_limits.bucket_for, the
  only cost such a run pays: a dict lookup, no Redis round trip), per call;
- one token taken from a limited target's bucket (the Lua script, one round trip to Redis),
  p50/p99 over ``--takes`` takes.

The end-to-end figure of the executor is bench/bench_executor.py's (runs/s and overhead per
run), to be run before and after a change of the start path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _services() -> Any:
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return None
    from scheduler_project.embedded import EmbeddedServices

    services = EmbeddedServices(ROOT / ".local" / "bench-target-limits")
    os.environ.update(services.start())
    return services


def _measure(takes: int) -> None:
    from jobs.models import Tenant
    from jobs.target_limits import Bucket, BucketStore, LimitCache, bucket_for
    from jobs.targets import TargetSpec

    now = datetime.now(UTC)
    tenant, _ = Tenant.objects.get_or_create(name="bench-targets", defaults={"created_at": now})
    spec = TargetSpec(
        kind="http",
        name="",
        url="https://api.example.com/hook",
        headers={},
        timeout=timedelta(seconds=5),
        retry_on_client_error=False,
    )
    cache = LimitCache(refresh_s=3600)
    cache.reload()
    calls = 200_000
    started = time.perf_counter()
    for _ in range(calls):
        bucket_for(spec, tenant_id=tenant.id, job_id="j", cache=cache)
    unlimited_ns = (time.perf_counter() - started) / calls * 1e9

    store = BucketStore()
    # A rate far above the takes: every take is granted, so this is the round trip alone.
    bucket = Bucket(f"bench:{now.timestamp()}", tenant.id, "api.example.com", 1e6, 1_000_000)
    store.take(bucket)
    latencies = []
    for _ in range(takes):
        began = time.perf_counter()
        store.take(bucket)
        latencies.append((time.perf_counter() - began) * 1e6)
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(f"unlimited run: bucket lookup {unlimited_ns:.0f} ns per run, no Redis round trip")
    print(f"limited run: one take {p50:.0f} us p50, {p99:.0f} us p99 ({takes} takes)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--takes", type=int, default=5000)
    args = parser.parse_args()
    services = _services()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        _measure(args.takes)
    finally:
        if services is not None:
            services.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
