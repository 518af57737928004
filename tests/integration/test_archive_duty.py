"""The archive runs on its own: a real `manage.py beat_engine` node archives a day past the hot
window with nobody calling the command, and keeps a day a live run needs hot
(beat_engine/history_archiver.py, docs/history.md, "Archive")."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from beat_engine.db_clock import read_database_clock
from jobs import archive_format as fmt
from jobs.models import ArchivedDay, Job, JobRun
from jobs.models_archive import ArchiveStep
from tests.support.beat_nodes import BeatNode
from tests.support.factories import job_factory
from tests.support.history_days import ago, fill_day
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_the_beat_node_archives_old_days_by_itself(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    now = read_database_clock()
    # Paused: the node fires nothing and only its duties touch the history.
    job = job_factory(now=now)
    Job.objects.filter(id=job.id).update(status="paused")
    old, kept = ago(now, 40), ago(now, 41)
    fill_day(job, old, 50)
    fill_day(job, kept, 2)
    JobRun.objects.filter(scheduled_for__date=kept).update(state="retry_wait", due_at=now)
    archive = tmp_path / "archive"
    node = BeatNode(
        "archive",
        tmp_path,
        {
            "SCHEDULER_HISTORY_PURGE_S": "0.5",
            "SCHEDULER_ARCHIVE_DIR": str(archive),
            "SCHEDULER_LEASE_TTL_S": "5",
            "SCHEDULER_LEASE_RENEW_S": "1",
        },
    )
    node.start()
    try:
        wait_until(
            lambda: ArchivedDay.objects.filter(day=old, step=ArchiveStep.ARCHIVED).exists(),
            timeout_s=60,
            what="the node's archive duty to archive the old day",
        )
        wait_until(lambda: bool(node.events("beat.history_days_kept_hot")), timeout_s=10)
    finally:
        node.stop()

    manifest, _ = fmt.verify_archive(fmt.day_directory(archive, old))
    assert manifest.entry("jobs_jobrun").rows == 50
    assert JobRun.objects.filter(scheduled_for__date=kept).count() == 2
    (event,) = node.events("beat.history_days_kept_hot")[:1]
    assert event["days"] == {kept.isoformat(): "a live run"}
