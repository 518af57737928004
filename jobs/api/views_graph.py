"""GET /v1/jobs/{id}/graph: the job's upstream and downstream jobs and the edges among them."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import selectors
from jobs.api.base import ApiView, errors
from jobs.api.serializers_graph import GraphQuery, JobGraphOut
from jobs.selectors_graph import GRAPH_MAX_JOBS, JobGraph, job_graph


def _relation(graph: JobGraph, job_id: uuid.UUID) -> str:
    if job_id == graph.job.id:
        return "self"
    if job_id in graph.upstream_ids:
        return "upstream"
    return "downstream" if job_id in graph.downstream_ids else "connected"


def graph_body(graph: JobGraph, scope: str) -> dict[str, Any]:
    jobs = [
        {
            "id": job.id,
            "name": job.name,
            "kind": job.kind,
            "status": job.status,
            "trigger_rule": job.trigger_rule,
            "relation": _relation(graph, job.id),
            "last_run_state": graph.last_states.get(job.id),
        }
        for job in graph.jobs
    ]
    edges = [{"parent_id": parent, "child_id": child} for parent, child in graph.edges]
    body = {
        "job_id": graph.job.id,
        "scope": scope,
        "jobs": jobs,
        "edges": edges,
        "truncated": graph.truncated,
        "max_jobs": GRAPH_MAX_JOBS,
    }
    return dict(JobGraphOut(body).data)


class JobGraphView(ApiView):
    @extend_schema(
        operation_id="jobs_graph",
        parameters=[GraphQuery],
        responses={200: JobGraphOut, **errors(404)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        query = GraphQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        scope = query.validated_data["scope"]
        # Another tenant's id is a 404 here, and every walk below stays in the job's tenant.
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        graph = job_graph(job, whole_dag=scope == "dag")
        return Response(graph_body(graph, scope))
