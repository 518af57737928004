"""Per-target rate limits of a tenant (docs/limits.md, "Per-target rate limits").

A row names a target of one tenant and the token bucket its runs share across every worker:
``target`` is an HTTP host (``api.example.com``, lower case), a group name that jobs opt into
with their ``target_group``, or ``*`` for every HTTP host of the tenant that has no row of its
own (each host then gets its own bucket with that rate). The buckets themselves live in Redis
(jobs/target_limits.py); these rows are what they are filled from.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

# The wildcard row: a bucket per HTTP host of the tenant that has no row of its own.
EVERY_HOST = "*"


class TargetLimit(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (tenant, target) serves lookups by tenant.
    tenant = models.ForeignKey(
        "jobs.Tenant", on_delete=models.CASCADE, related_name="target_limits", db_index=False
    )
    target = models.CharField(max_length=255)
    # Tokens added per second, and the most the bucket holds (the burst a quiet target gets).
    rate_per_s = models.FloatField()
    burst = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "target"], name="target_limit_unique"),
            models.CheckConstraint(
                condition=Q(rate_per_s__gt=0, burst__gte=1), name="target_limit_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.target}: {self.rate_per_s:g}/s, burst {self.burst}"
