"""Routes under /v1, plus the OpenAPI schema and its interactive docs."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import (
    SpectacularJSONAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from jobs.api import (
    views,
    views_explain,
    views_graph,
    views_runs,
    views_target_limits,
    views_webhooks,
)

app_name = "v1"

urlpatterns = [
    path("jobs", views.JobCollectionView.as_view(), name="job-list"),
    path("jobs/bulk", views.JobBulkView.as_view(), name="job-bulk"),
    path("jobs/<uuid:job_id>", views.JobItemView.as_view(), name="job-detail"),
    path("jobs/<uuid:job_id>/trigger", views.JobTriggerView.as_view(), name="job-trigger"),
    path("jobs/<uuid:job_id>/runs", views_runs.JobRunsView.as_view(), name="job-runs"),
    path("jobs/<uuid:job_id>/graph", views_graph.JobGraphView.as_view(), name="job-graph"),
    path("jobs/<uuid:job_id>/explain", views_explain.JobExplainView.as_view(), name="job-explain"),
    path("runs/<uuid:run_id>", views_runs.RunItemView.as_view(), name="run-detail"),
    path("runs/<uuid:run_id>/cancel", views_runs.RunCancelView.as_view(), name="run-cancel"),
    path("dead-letters", views_runs.DeadLetterCollectionView.as_view(), name="dead-letter-list"),
    path(
        "dead-letters/<int:dead_letter_id>/replay",
        views_runs.DeadLetterReplayView.as_view(),
        name="dead-letter-replay",
    ),
    path("webhooks", views_webhooks.WebhookCollectionView.as_view(), name="webhook-list"),
    path(
        "webhooks/<uuid:webhook_id>",
        views_webhooks.WebhookItemView.as_view(),
        name="webhook-detail",
    ),
    path(
        "target-limits",
        views_target_limits.TargetLimitCollectionView.as_view(),
        name="target-limit-list",
    ),
    path(
        "target-limits/<int:target_limit_id>",
        views_target_limits.TargetLimitItemView.as_view(),
        name="target-limit-detail",
    ),
    path("schedules/preview", views_runs.SchedulePreviewView.as_view(), name="schedule-preview"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("docs", SpectacularSwaggerView.as_view(url_name="v1:openapi"), name="docs"),
    path("redoc", SpectacularRedocView.as_view(url_name="v1:openapi"), name="redoc"),
]
