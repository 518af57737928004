"""A stock Celery app whose "jobs.execute_run" only records what it received, in Redis.

It proves that messages the engine writes straight into the broker are ones a stock Celery
worker accepts, decodes and runs with the right arguments.
"""

from __future__ import annotations

import json
import os

import redis
from celery import Celery

from scheduler_project.env import celery_broker_from_redis_url

RECEIVED_KEY = "probe:received"

app = Celery("probe", broker=celery_broker_from_redis_url(os.environ["REDIS_URL"]))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue="scheduler",
    worker_hijack_root_logger=False,
    # The one option a stock worker needs for the engine's messages: a list per priority
    # (docs/limits.md, "Priorities"); kombu's default steps would leave 1, 2, 4, 5, 7 and 8 unread.
    broker_transport_options={"priority_steps": list(range(10))},
)


@app.task(name="jobs.execute_run", ignore_result=True)
def execute_run(run_id: str, attempt: int) -> None:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.rpush(RECEIVED_KEY, json.dumps([run_id, attempt]))
