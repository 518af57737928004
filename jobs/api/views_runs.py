"""Run history, run detail and cancel, dead letters and replay, schedule preview."""

from __future__ import annotations

import uuid
from zoneinfo import ZoneInfo

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from beat_engine.schedules import ScheduleKind, ScheduleSpec
from jobs import selectors, validation
from jobs.api.base import ApiView, errors
from jobs.api.fields import utc_iso
from jobs.api.pagination import KeyField, paginate
from jobs.api.serializers_runs import (
    RUN_OUT_COLUMNS,
    DeadLetterListQuery,
    DeadLetterOut,
    DeadLetterPage,
    PreviewOut,
    PreviewQuery,
    ReplayOut,
    RunDetailOut,
    RunListQuery,
    RunOut,
    RunPage,
    run_rows_out,
)
from jobs.errors import HistoryArchived, InvalidInput, InvalidTransition
from jobs.models import JobRun
from jobs.services.dead_letters import dead_letter_replay
from jobs.services.runs import run_request_cancel
from jobs.states import RunState

# (job, scheduled_for) is unique, so scheduled_for alone is an exact keyset for one job's runs,
# and the unique firing index (job, scheduled_for) of each run partition, scanned backwards,
# serves each page as one index range scan per partition (jobs/run_partitions.py).
RUN_KEYS = (KeyField("scheduled_for", "datetime"),)
DEAD_LETTER_KEYS = (KeyField("moved_at", "datetime"), KeyField("id", "int"))


class JobRunsView(ApiView):
    @extend_schema(
        operation_id="jobs_runs_list",
        parameters=[RunListQuery],
        responses={200: RunPage, **errors(404, 410)},
        description=(
            "The job's runs in the hot window (SCHEDULER_HISTORY_HOT_DAYS, 30 days by default), "
            "newest firing first. Older days are archived: the last page says which days of "
            "the range are (archived), and a range entirely archived is a 410."
        ),
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        query = RunListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        since, until = query.validated_data.get("since"), query.validated_data.get("until")
        runs = selectors.run_list(
            tenant=self.tenant,
            job_id=job_id,
            state=query.validated_data.get("state"),
            since=since,
            until=until,
            columns=RUN_OUT_COLUMNS,
        )
        windows = selectors.run_windows(since=since, until=until, now=self.now)
        page = paginate(runs, request, RUN_KEYS, windows)
        if not page.items:
            # No runs: a 404 if the job is not the tenant's, before any word on archived days.
            selectors.job_get(tenant=self.tenant, job_id=job_id)
        # The hot window ends on the page without a next one: say which days of the range are
        # archived, so an empty or short page never reads as "never ran" (docs/api.md).
        archived = None
        if page.next is None:
            span = selectors.archived_span(since=since, until=until)
            if span is not None:
                if not page.items and selectors.range_archived(span, since=since, until=until):
                    raise HistoryArchived("every day of the range is archived", span=span.to_json())
                archived = span.to_json()
        results = run_rows_out(page.items)
        return Response(
            {"results": results, "next": page.next, "previous": page.previous, "archived": archived}
        )


class RunItemView(ApiView):
    @extend_schema(operation_id="runs_retrieve", responses={200: RunDetailOut, **errors(404, 410)})
    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        try:
            run = selectors.run_get(tenant=self.tenant, run_id=run_id)
        except JobRun.DoesNotExist:
            span = selectors.run_archived_day(run_id)
            if span is None:
                raise
            raise HistoryArchived("the run's day is archived", span=span.to_json()) from None
        return Response(RunDetailOut(run).data)


class RunCancelView(ApiView):
    @extend_schema(
        operation_id="runs_cancel",
        request=None,
        responses={
            200: OpenApiResponse(RunDetailOut, description="Cancelled before it started"),
            202: OpenApiResponse(RunDetailOut, description="Running: asked to stop"),
            **errors(404, 409),
        },
    )
    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        if request.data:
            raise InvalidInput("body", "cancel takes no body")
        run = selectors.run_get(tenant=self.tenant, run_id=run_id)
        if not run_request_cancel(run_id=run.id, now=self.now):
            raise InvalidTransition(f"the run is {run.state}; only waiting or running runs stop")
        run = selectors.run_get(tenant=self.tenant, run_id=run_id)
        status = 202 if run.state == RunState.RUNNING else 200
        return Response(RunDetailOut(run).data, status=status)


class DeadLetterCollectionView(ApiView):
    @extend_schema(
        operation_id="dead_letters_list",
        parameters=[DeadLetterListQuery],
        responses={200: DeadLetterPage, **errors()},
    )
    def get(self, request: Request) -> Response:
        query = DeadLetterListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        letters = selectors.dead_letter_list(
            tenant=self.tenant,
            job_id=query.validated_data.get("job_id"),
            replayed=query.validated_data.get("replayed"),
        )
        page = paginate(letters, request, DEAD_LETTER_KEYS)
        results = DeadLetterOut(page.items, many=True).data
        return Response({"results": results, "next": page.next, "previous": page.previous})


class DeadLetterReplayView(ApiView):
    @extend_schema(
        operation_id="dead_letters_replay",
        request=None,
        responses={200: ReplayOut, **errors(404, 409)},
    )
    def post(self, request: Request, dead_letter_id: int) -> Response:
        if request.data:
            raise InvalidInput("body", "replay takes no body")
        letter = selectors.dead_letter_get(tenant=self.tenant, dead_letter_id=dead_letter_id)
        if not dead_letter_replay(run_id=letter.run_id, now=self.now):
            raise InvalidTransition(
                f"the run is {letter.run.state}; only dead or failed runs replay"
            )
        letter = selectors.dead_letter_get(tenant=self.tenant, dead_letter_id=dead_letter_id)
        body = {"dead_letter": DeadLetterOut(letter).data, "run": RunOut(letter.run).data}
        return Response(body)


class SchedulePreviewView(ApiView):
    @extend_schema(
        operation_id="schedules_preview",
        parameters=[PreviewQuery],
        responses={200: PreviewOut, **errors()},
    )
    def get(self, request: Request) -> Response:
        query = PreviewQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        after = params.get("after") or self.now
        validation.validate_timezone(params["timezone"])
        spec = ScheduleSpec(
            kind=ScheduleKind.CRON, cron=params["schedule"], timezone=params["timezone"]
        )
        validation.validate_schedule(spec, now=after)
        fires = selectors.job_preview_fires(spec=spec, after=after, count=params["count"])
        zone = ZoneInfo(params["timezone"])
        body = {
            "schedule": params["schedule"],
            "timezone": params["timezone"],
            "fires": [utc_iso(f) for f in fires],
            "fires_local": [f.astimezone(zone).isoformat() for f in fires],
        }
        return Response(body)
