"""For tests of query plans: a jobs table as big as a real one, and the nodes of a plan read
with EXPLAIN (FORMAT JSON)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

# Copies of one job with new ids and names, and the columns given set alike in every copy.
# The record is built in a LATERAL: `(jsonb_populate_record(...)).*` calls the function once
# per column of jobs_job.
_COPY_JOB_SQL = """
INSERT INTO jobs_job
SELECT r.*
  FROM jobs_job j, generate_series(1, %(count)s) AS i,
       LATERAL jsonb_populate_record(NULL::jobs_job, to_jsonb(j) || jsonb_build_object(
         'id', gen_random_uuid(), 'name', j.name || '-' || i) || %(fields)s::jsonb) AS r
 WHERE j.id = %(job)s
"""


def copy_job(job_id: uuid.UUID, count: int, **fields: Any) -> None:
    """Insert ``count`` copies of the job ``job_id``, each with ``fields`` (column values)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _COPY_JOB_SQL,
            {"job": job_id, "count": count, "fields": json.dumps(fields, cls=DjangoJSONEncoder)},
        )


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """``plan`` and every node under it, depth first."""
    return [plan, *(n for child in plan.get("Plans", []) for n in plan_nodes(child))]
