"""The status pages: who may see them, which tenant's rows they show, and charts with data."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import redis as redis_lib
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from beat_engine.db_clock import read_database_clock
from beat_engine.lease_keys import NODES_KEY, lease_key
from jobs.models import DeadLetter, Job, JobRun, PartitionEpoch, RunAttempt, Tenant, TenantMember
from jobs.states import AttemptOutcome, RunState
from jobs.status import run_window
from tests.support.factories import job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(params=[True, False], ids=["by-job", "by-scan"])
def runs_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways the overview reads runs due in a window (jobs/status/run_window.py)."""
    by_job = bool(request.param)
    monkeypatch.setattr(run_window, "by_job_is_cheaper", lambda **_: by_job)
    return by_job


@pytest.fixture
def superuser() -> Client:
    # No password: hashing one costs a second of PBKDF2 per test, and force_login needs none.
    return _client(User.objects.create(username="root", is_staff=True, is_superuser=True))


def _staff_of(tenant: Tenant) -> Client:
    user = User.objects.create(username=f"staff-{tenant.name}", is_staff=True)
    TenantMember.objects.create(user=user, tenant=tenant)
    return _client(user)


def _finished_run(job: Job, *, due: datetime, state: str = RunState.SUCCEEDED, attempts: int = 1,
                  lateness_s: float = 0.2, error: str = "") -> JobRun:  # fmt: skip
    """A run that fired at ``due`` and ended after ``attempts`` attempts, each 1 s long."""
    run = run_factory(
        job, scheduled_for=due, state=state, attempt=attempts, due_at=None,
        queued_at=due, published_at=due + timedelta(seconds=lateness_s),
        started_at=due + timedelta(seconds=lateness_s + 0.1),
        finished_at=due + timedelta(seconds=attempts * 2), lateness=timedelta(seconds=lateness_s),
        start_lag=timedelta(seconds=lateness_s + 0.1), last_error=error, worker="worker-1@host",
        created_at=due - timedelta(seconds=1),
    )  # fmt: skip
    for n in range(1, attempts + 1):
        start = due + timedelta(seconds=2 * (n - 1))
        last = n == attempts
        RunAttempt.objects.create(
            run=run, attempt=n, worker=f"worker-{n}@host", queued_at=start,
            started_at=start + timedelta(milliseconds=100),
            finished_at=start + timedelta(seconds=1),
            outcome=AttemptOutcome.SUCCEEDED if last and state == RunState.SUCCEEDED
            else AttemptOutcome.FAILED,
            error="" if last and state == RunState.SUCCEEDED else f"boom {n}",
        )  # fmt: skip
    return run


def _points(html: str, chart_id: str) -> int:
    """data-points of the chart inside the element with id ``chart_id``."""
    match = re.search(rf'id="{chart_id}">\s*<svg[^>]*data-points="(\d+)"', html)
    assert match, f"no chart in #{chart_id}"
    return int(match.group(1))


def _bar_total(html: str, layer: str) -> int:
    """The sum of a stacked bar layer's values, read from the bars' hover titles."""
    return sum(int(n) for n in re.findall(rf"<title>{layer} at \d\d:\d\d: (\d+)</title>", html))


# --- who may see the pages --------------------------------------------------------------


def _pages(job: Job, run: JobRun) -> list[str]:
    return [
        reverse("status:overview"),
        reverse("status:job", args=[job.pk]),
        reverse("status:run", args=[run.pk]),
    ]


def test_anonymous_visitors_are_sent_to_the_admin_login() -> None:
    job = job_factory()
    run = run_factory(job)
    for url in _pages(job, run):
        response = Client().get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login") + "?next=")


def test_accounts_that_are_not_tenant_staff_are_refused() -> None:
    job = job_factory()
    run = run_factory(job)
    plain = _client(User.objects.create(username="plain"))
    loose_staff = _client(User.objects.create(username="loose", is_staff=True))
    for client in (plain, loose_staff):
        for url in _pages(job, run):
            assert client.get(url).status_code == 403


def test_tenant_staff_get_404_for_another_tenants_job_and_run() -> None:
    mine, theirs = tenant_factory(), tenant_factory()
    my_job, their_job = job_factory(mine), job_factory(theirs)
    my_run, their_run = run_factory(my_job), run_factory(their_job)
    client = _staff_of(mine)
    assert client.get(reverse("status:job", args=[my_job.pk])).status_code == 200
    assert client.get(reverse("status:run", args=[my_run.pk])).status_code == 200
    assert client.get(reverse("status:job", args=[their_job.pk])).status_code == 404
    assert client.get(reverse("status:run", args=[their_run.pk])).status_code == 404
    # A tenant filter in the query string does not widen a tenant's scope.
    url = reverse("status:job", args=[their_job.pk]) + f"?tenant={theirs.pk}"
    assert client.get(url).status_code == 404


def test_superuser_sees_every_tenant_and_may_narrow_to_one(
    superuser: Client, runs_form: bool
) -> None:
    now = read_database_clock()
    first, second = tenant_factory("acme-ops"), tenant_factory("globex-ops")
    for tenant in (first, second):
        _finished_run(job_factory(tenant), due=now - timedelta(minutes=5), state=RunState.FAILED,
                      error=f"failure of {tenant.name}")  # fmt: skip
    body = superuser.get(reverse("status:overview")).content.decode()
    assert "failure of acme-ops" in body
    assert "failure of globex-ops" in body
    narrowed = superuser.get(reverse("status:overview") + f"?tenant={first.pk}").content.decode()
    assert "failure of acme-ops" in narrowed
    assert "failure of globex-ops" not in narrowed
    # Both runs fired in the same minute: two for all tenants, one for the chosen tenant.
    minute = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    assert f"firings/s at {minute:%H:%M}: 0.0333/s" in body
    assert f"firings/s at {minute:%H:%M}: 0.0167/s" in narrowed
    assert superuser.get(reverse("status:overview") + "?tenant=999999").status_code == 404


# --- overview ----------------------------------------------------------------------------


def test_overview_charts_hold_the_seeded_minutes(superuser: Client, runs_form: bool) -> None:
    now = read_database_clock()
    job = job_factory()
    # Every run falls in the first seconds of a whole minute, so none straddles two buckets.
    minute = now.replace(second=0, microsecond=0)
    # Three minutes with runs: 1, 2 and 3 runs; one retried, one dead-lettered.
    for minutes_ago, count in ((40, 1), (20, 2), (5, 3)):
        for k in range(count):
            due = minute - timedelta(minutes=minutes_ago) + timedelta(seconds=k)
            _finished_run(job, due=due, lateness_s=0.1 * (k + 1))
    retried = _finished_run(job, due=minute - timedelta(minutes=10), attempts=2)
    dead = _finished_run(job, due=minute - timedelta(minutes=8), state=RunState.DEAD, attempts=3,
                         error="HTTP 500 from target")  # fmt: skip
    moved = minute - timedelta(minutes=7)
    DeadLetter.objects.create(
        run=dead, job=job, tenant=job.tenant, attempts=3, last_error="HTTP 500", moved_at=moved
    )
    # Outside the hour: not drawn.
    _finished_run(job, due=now - timedelta(hours=3))

    body = superuser.get(reverse("status:overview")).content.decode()
    # Firings: a point for every minute of the hour once anything fired in it.
    assert _points(body, "firings") == 60
    # Lag charts: p50 and p99 for the five minutes that have runs.
    assert _points(body, "publish-lag") == 2 * 5
    assert _points(body, "start-lag") == 2 * 5
    # Retries: run `retried` had 1 retry, `dead` had 2; and 1 dead letter.
    assert retried.attempt == 2
    assert _bar_total(body, "retries") == 3
    assert _bar_total(body, "dead letters") == 1
    # Runs by state, last hour vs 24 h.
    assert re.search(r"state-succeeded\">succeeded</span></td><td class=\"num\">7</td>"
                     r"<td class=\"num\">8</td>", body)  # fmt: skip
    # The dead run is listed among the latest failures, linked to its run page.
    assert reverse("status:run", args=[dead.pk]) in body
    assert "HTTP 500 from target" in body


def test_firings_per_second_are_the_minute_counts_over_60(
    superuser: Client, runs_form: bool
) -> None:
    now = read_database_clock()
    job = job_factory()
    minute = now.replace(second=0, microsecond=0) - timedelta(minutes=30)
    for k in range(6):
        _finished_run(job, due=minute + timedelta(seconds=k))
    body = superuser.get(reverse("status:overview")).content.decode()
    assert f"firings/s at {minute:%H:%M}: 0.1/s" in body


def test_overview_without_runs_shows_the_empty_state(superuser: Client) -> None:
    body = superuser.get(reverse("status:overview")).content.decode()
    assert _points(body, "firings") == 0
    assert "No firings in the last hour" in body


def test_overview_lists_beat_nodes_their_partitions_and_queue_depth(
    superuser: Client, redis_client: redis_lib.Redis
) -> None:
    seconds, _ = redis_client.time()
    now_ms = int(seconds) * 1000
    ttl_ms = int(float(settings.SCHEDULER["LEASE_TTL_S"]) * 1000)
    # node-a heartbeated 2 s ago; node-b's registration ran out but it still holds a lease.
    redis_client.zadd(NODES_KEY, {"node-a": now_ms - 2000 + ttl_ms, "node-b": now_ms - 500})
    for p in (0, 1, 2, 5):
        redis_client.set(lease_key(p), "node-a")
    redis_client.set(lease_key(3), "node-b")
    PartitionEpoch.objects.update_or_create(partition=0, defaults={"epoch": 7, "owner": "node-a"})
    # Partition 1's stored epoch still names its previous owner: it is changing hands.
    PartitionEpoch.objects.update_or_create(partition=1, defaults={"epoch": 4, "owner": "node-b"})
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    redis_client.lpush(default, "m1", "m2")
    redis_client.lpush(f"{default}\x06\x166", "m3")
    # A queue only the engine's broker ledger names.
    redis_client.lpush("reports\x06\x169", "m4", "m5")
    redis_client.set("sched:broker:pushed:reports\x06\x169", 2)

    body = superuser.get(reverse("status:overview")).content.decode()
    nodes = body[body.index('id="nodes"') :]
    assert "No live beat node" not in nodes
    row_a = nodes[nodes.index("node-a") : nodes.index("</tr>", nodes.index("node-a"))]
    assert "live" in row_a
    assert "0-2, 5" in row_a
    heartbeat = datetime.fromtimestamp((now_ms - 2000) / 1000, tz=UTC)
    assert f"{heartbeat:%H:%M:%S} UTC" in row_a
    row_b = nodes[nodes.index("node-b") : nodes.index("</tr>", nodes.index("node-b"))]
    assert "expired" in row_b
    partitions = int(settings.SCHEDULER["PARTITIONS"])
    assert f'Unowned: <span class="mono">4, 6-{partitions - 1}</span>' in nodes
    assert 'Changing owner: <span class="mono">1</span>' in nodes
    assert re.search(rf'<td>{default}</td><td class="num">3</td>', body)
    assert re.search(r'<td>reports</td><td class="num">2</td>', body)


def test_overview_says_so_when_no_beat_node_is_live(
    superuser: Client, redis_client: redis_lib.Redis
) -> None:
    body = superuser.get(reverse("status:overview")).content.decode()
    assert "No live beat node" in body
    # A node whose registration ran out does not count, even while its leases last.
    seconds, _ = redis_client.time()
    redis_client.zadd(NODES_KEY, {"node-b": int(seconds) * 1000 - 500})
    redis_client.set(lease_key(0), "node-b")
    body = superuser.get(reverse("status:overview")).content.decode()
    assert "node-b" in body
    assert "No live beat node" in body


def test_tenant_staff_do_not_see_the_shared_engine_panels() -> None:
    tenant = tenant_factory()
    body = _staff_of(tenant).get(reverse("status:overview")).content.decode()
    assert 'id="nodes"' not in body
    assert 'id="queues"' not in body


# --- job page ----------------------------------------------------------------------------


def test_job_page_shows_next_firings_timeline_lateness_and_success_rate(superuser: Client) -> None:
    now = read_database_clock()
    job = job_factory(cron="30 9 * * *", timezone="Europe/Paris")
    for day in range(1, 5):
        _finished_run(job, due=now - timedelta(days=day), lateness_s=0.05 * day)
    _finished_run(job, due=now - timedelta(days=5), state=RunState.DEAD, attempts=3)
    body = superuser.get(reverse("status:job", args=[job.pk])).content.decode()
    # 10 firings at 09:30 Paris time, shown in the zone and in UTC.
    assert body.count(" 09:30:00 CE") == 10
    assert _points(body, "timeline") == 5
    # The dead run's two extra attempts are drawn as ticks above its dot.
    assert body.count('class="attempt state-dead"') == 2
    # Publish lag and start lag of each of the five runs.
    assert _points(body, "job-lateness") == 2 * 5
    assert "publish lag at " in body
    # The figures GET /v1/jobs/{id} serves: 4 of 5 outcomes succeeded, 1 of 5 retried.
    success = body[body.index('id="success"') :]
    assert "<strong>80.0 %</strong>" in success
    assert "<dd>20.0 % of the runs that started</dd>" in success
    # Publish lags 0.05..0.20 s: p50 of the five is 0.15 s.
    assert "p50 150 ms" in success
    assert reverse("admin:jobs_job_change", args=[job.pk]) in body


def test_job_page_of_a_job_without_runs_renders_empty_charts(superuser: Client) -> None:
    job = job_factory()
    body = superuser.get(reverse("status:job", args=[job.pk])).content.decode()
    assert _points(body, "timeline") == 0
    assert "No runs yet" in body


# --- run page ----------------------------------------------------------------------------


def test_run_page_lists_every_attempt_with_worker_timings_error_and_result(
    superuser: Client,
) -> None:
    now = read_database_clock()
    job = job_factory()
    run = _finished_run(job, due=now - timedelta(minutes=3), attempts=3)
    JobRun.objects.filter(pk=run.pk).update(result={"status": 200, "body": "<ok & done>"})
    body = superuser.get(reverse("status:run", args=[run.pk])).content.decode()
    for n in (1, 2, 3):
        assert f"worker-{n}@host" in body
    assert "boom 1" in body
    assert "boom 2" in body
    # Each attempt ran 900 ms after a 100 ms wait.
    assert body.count("<td>900 ms</td>") == 3
    assert body.count("<td>100 ms</td>") == 3
    # The result is shown escaped.
    assert "&lt;ok &amp; done&gt;" in body
    assert "<ok & done>" not in body


def test_runs_are_read_by_job_once_the_history_outweighs_the_jobs_and_the_window() -> None:
    from django.db import connection

    now = read_database_clock()
    hour = {"since": now - timedelta(hours=1), "until": now}
    day = {"since": now - timedelta(hours=24), "until": now}
    jobs = [job_factory() for _ in range(3)]
    with connection.cursor() as cursor:
        # relpages counts the pages earlier tests' rolled-back runs left behind, and a scan
        # reads them too: start from an empty file (the truncate rolls back with the test).
        cursor.execute("TRUNCATE jobs_jobrun CASCADE")
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_jobrun")
    # An empty history: scanning it is cheaper than one index probe per job.
    assert not run_window.by_job_is_cheaper(**hour)
    # Five days of minutely runs: the hour's 60 runs by job beat a scan of the 7,200; the day's
    # 1,440 do not.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                                     state, attempt, epoch, dedup_key, worker, cancel_requested,
                                     finished_at, last_error, replayed_count, created_at)
            SELECT jobs_run_id(%s - n * interval '1 minute'), %s, %s, %s,
                   %s - n * interval '1 minute', 'schedule',
                   'succeeded', 1, 1, md5(n::text), '', false, %s, '', 0, %s
              FROM generate_series(1, 7200) AS n
            """,
            [now, jobs[0].pk, jobs[0].tenant_id, jobs[0].partition, now, now, now],
        )
        cursor.execute("ANALYZE jobs_jobrun")
    assert run_window.by_job_is_cheaper(**hour)
    assert not run_window.by_job_is_cheaper(**day)


def test_a_panel_whose_query_runs_too_long_says_so_and_the_page_still_renders(
    superuser: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.status import overview_data

    def slow(window: overview_data.Window, *, tenant_id: int | None) -> object:
        return overview_data._rows("SELECT pg_sleep(5)", [])

    monkeypatch.setattr(overview_data, "STATEMENT_TIMEOUT_MS", 50)
    monkeypatch.setattr(overview_data, "firings_and_lateness", slow)
    job = job_factory()
    _finished_run(job, due=read_database_clock() - timedelta(minutes=2), state=RunState.DEAD)
    response = superuser.get(reverse("status:overview"))
    assert response.status_code == 200
    body = response.content.decode()
    assert _points(body, "firings") == 0
    assert "Unavailable: the query failed or took too long" in body
    # The other panels, read after the cancelled statement, are there.
    assert reverse("status:run", args=[JobRun.objects.get(job=job).pk]) in body


def test_unknown_ids_are_404_and_names_are_escaped(superuser: Client) -> None:
    import uuid

    assert superuser.get(reverse("status:job", args=[uuid.uuid4()])).status_code == 404
    assert superuser.get(reverse("status:run", args=[uuid.uuid4()])).status_code == 404
    job = job_factory(name='<script>alert("job")</script>')
    _finished_run(job, due=read_database_clock() - timedelta(minutes=1), state=RunState.FAILED,
                  error="<img src=x onerror=alert(1)>")  # fmt: skip
    for url in (reverse("status:overview"), reverse("status:job", args=[job.pk])):
        body = superuser.get(url).content.decode()
        assert "<script>alert" not in body
        assert "<img src=x" not in body
        assert "&lt;script&gt;alert(&quot;job&quot;)&lt;/script&gt;" in body
