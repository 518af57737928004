"""Create the demo tenant, an admin login, an API key and a demo cron job (idempotent)."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from beat_engine.clock import SystemClock
from jobs.models import Job, JobStatus, TargetKind, Tenant
from jobs.services.jobs import JobInput, job_create
from jobs.services.tenants import api_key_create, tenant_create

DEMO_TENANT = "demo"
DEMO_JOB = "demo-heartbeat-every-minute"


class Command(BaseCommand):
    help = "Seed a demo tenant, admin user, API key and an every-minute cron job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, **options: Any) -> None:
        now = SystemClock().now()
        tenant = Tenant.objects.filter(name=DEMO_TENANT).first() or tenant_create(
            name=DEMO_TENANT, now=now
        )
        # A fresh password each start: nothing secret lives in the repository.
        password = secrets.token_urlsafe(12)
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        user.set_password(password)
        user.save()
        _, api_key = api_key_create(tenant=tenant, name="demo", now=now)
        job = (
            Job.objects.filter(tenant=tenant, name=DEMO_JOB)
            .exclude(status=JobStatus.CANCELLED)
            .first()
        )
        if job is None:
            job = job_create(
                tenant=tenant,
                data=JobInput(
                    name=DEMO_JOB,
                    cron="* * * * *",
                    timezone="UTC",
                    target_kind=TargetKind.CALLABLE,
                    target_name="demo.heartbeat",
                    payload={"hello": "world"},
                ),
                now=now,
            )
        port = options["port"]
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "=" * 72,
                    f"  admin:    http://127.0.0.1:{port}/admin/",
                    f"            user: admin   password: {password}",
                    f"  api:      http://127.0.0.1:{port}/v1/",
                    f"            key for tenant {tenant.name}: {api_key}",
                    f"  demo job: {job.name} ({job.cron_expression}), next fire {job.next_fire_at}",
                    "=" * 72,
                    "",
                ]
            )
        )
