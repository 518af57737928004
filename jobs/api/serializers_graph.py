"""Shapes of GET /v1/jobs/{id}/graph: the jobs of a job's DAG and the edges among them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.api.fields import StrictQuery

SCOPES = ("lineage", "dag")


class GraphQuery(StrictQuery):
    scope = serializers.ChoiceField(
        choices=SCOPES,
        required=False,
        default="lineage",
        help_text="lineage (default): the job's ancestors and descendants; dag: every job "
        "connected to it by edges, siblings included.",
    )


class GraphJobOut(serializers.Serializer[Any]):
    job_id = serializers.UUIDField(source="id")
    name = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    trigger_rule = serializers.CharField()
    relation = serializers.ChoiceField(
        choices=["self", "upstream", "downstream", "connected"],
        help_text="Where the job stands from the requested one; connected: neither an "
        "ancestor nor a descendant (only with scope=dag).",
    )
    last_run_state = serializers.CharField(allow_null=True)


class GraphEdgeOut(serializers.Serializer[Any]):
    parent_id = serializers.UUIDField()
    child_id = serializers.UUIDField()


class JobGraphOut(serializers.Serializer[Any]):
    job_id = serializers.UUIDField()
    scope = serializers.CharField()
    jobs = GraphJobOut(many=True)
    edges = GraphEdgeOut(many=True)
    truncated = serializers.BooleanField(
        help_text="The graph has more than max_jobs jobs; only that many are listed."
    )
    max_jobs = serializers.IntegerField()
