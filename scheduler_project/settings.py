"""Django settings, read from the environment once at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from beat_engine import priority_order
from scheduler_project.env import (
    ConfigError,
    celery_broker_from_redis_url,
    database_from_url,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
)
from scheduler_project.gevent_patch import under_gevent
from scheduler_project.redis_urls import broker_transport_options, check_redis_url, is_sentinel_url

BASE_DIR = Path(__file__).resolve().parent.parent

# Production must set DJANGO_SECRET_KEY; the fallback only serves local development and tests.
DEV_SECRET_KEY = "dev-insecure-key-change-me-0123456789-abcdefghijklmnop"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_celery_results",
    "jobs",
    "beat_engine",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # No primary reachable (a PostgreSQL failover): 503 with Retry-After, not 500.
    "jobs.db_unavailable.DatabaseUnavailableMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "scheduler_project.urls"
WSGI_APPLICATION = "scheduler_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Only PostgreSQL: the claim path relies on ON CONFLICT, partial indexes and row locks.
DATABASE_URL = env_str("DATABASE_URL", "postgresql://postgres@localhost:5432/scheduler")
DATABASES = {"default": database_from_url(DATABASE_URL)}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The worker's start and outcome statements are prepared on its connection (jobs/prepared.py);
# Django's own statements never are (it binds on the client). Off (None) behind a
# transaction-pooling PgBouncer older than 1.21, which cannot keep a prepared statement.
DATABASES["default"]["OPTIONS"]["prepare_threshold"] = (
    5 if env_bool("SCHEDULER_PREPARED_STATEMENTS", True) else None
)
if under_gevent():
    # A gevent worker runs every task on a new greenlet, each with a connection of its own:
    # they borrow from a pool of at most this many, instead of opening one per task
    # (jobs/worker_pools.py). Django's pool keeps connections itself: no CONN_MAX_AGE.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 2,
        "max_size": env_int("SCHEDULER_GEVENT_DB_POOL_MAX", 20, minimum=1),
        "timeout": 30,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://localhost:6379/0")
# sentinel://h1:26379;sentinel://h2:26379 URLs (REDIS_URL, CELERY_BROKER_URL) name the sentinels;
# this names the master they monitor (docs/operations.md, "Redis failover (Sentinel)").
REDIS_SENTINEL_MASTER = env_str("SCHEDULER_REDIS_SENTINEL_MASTER", "")
REDIS_SENTINEL_PASSWORD = env_str("SCHEDULER_REDIS_SENTINEL_PASSWORD", "")
check_redis_url(
    REDIS_URL, name="REDIS_URL", master_name=REDIS_SENTINEL_MASTER,
    sentinel_password=REDIS_SENTINEL_PASSWORD,
)  # fmt: skip

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".local" / "static"

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Behind TLS in production set DJANGO_SECURE=true: secure cookies, HTTPS redirect and HSTS,
# which is what `manage.py check --deploy` asks for. Local runs serve plain HTTP.
SECURE_DEPLOYMENT = env_bool("DJANGO_SECURE", False)
SESSION_COOKIE_SECURE = SECURE_DEPLOYMENT
CSRF_COOKIE_SECURE = SECURE_DEPLOYMENT
SECURE_SSL_REDIRECT = SECURE_DEPLOYMENT
SECURE_HSTS_SECONDS = 31_536_000 if SECURE_DEPLOYMENT else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_DEPLOYMENT
SECURE_HSTS_PRELOAD = SECURE_DEPLOYMENT
# The health check is polled over plain HTTP by load balancers inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

# json: one object per line with the event's fields, for log pipelines (the default).
# text: one readable line per event with the process's name; scripts/run sets it.
SCHEDULER_LOG_FORMAT = env_choice("SCHEDULER_LOG_FORMAT", "json", ("json", "text"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "beat_engine.log_format.JsonLineFormatter"},
        "text": {"()": "beat_engine.log_format.TextLineFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": SCHEDULER_LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Celery -----------------------------------------------------------------------------
# Every choice below trades throughput for "no accepted firing is lost"; see docs/architecture.md.
CELERY_BROKER_URL = celery_broker_from_redis_url(env_str("CELERY_BROKER_URL", REDIS_URL))
CELERY_RESULT_BACKEND = "django-db"
# A crash between receiving and finishing must leave the message in the broker: ack late.
CELERY_TASK_ACKS_LATE = True
# Without this, a worker child killed by the OOM killer or SIGKILL acks its task and loses it.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# With late acks each process reserves exactly one message, so a long job holds up no others.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A broker connection loss must not kill running attempts. With True, Celery terminates every
# running late-acked task when its consumer loses the broker (consumer.py,
# on_connection_error_after_connected), so each attempt would sit `running` until its lease
# expired and then run again: a Redis blip would turn into a second execution. With False the
# attempt keeps running and heartbeating, since its lease lives in PostgreSQL, and records its
# outcome once. Its message is not lost either way: with the Redis transport the unacked copy
# sits in kombu's unacked index; on reconnect kombu restores it to the queue (or the visibility
# timeout does), and that redelivery finds the run no longer queued at that attempt, so the
# start compare-and-set drops it. The ack of the original, on the lost channel, may fail and is
# only logged. The pending-deprecation warning Celery logs with False refers to its default,
# which becomes True in Celery 6; the explicit False here keeps working. docs/execution.md
# "Broker connection loss".
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Celery's Django fixup closes every database connection before and after each task unless
# this is set, so each run paid a new PostgreSQL connection (most of its cost). With it the
# fixup closes them every 1000 tasks; in between, execute_run drops a broken or
# CONN_MAX_AGE-old connection itself, and a connection found lost by its start is replaced
# there (jobs/execution.py, run_delivery, says why it sends no CONN_HEALTH_CHECKS probe).
CELERY_DB_REUSE_MAX = 1000
# Gives each prefork pool process the shutdown event a pool restart sets; a process holding
# SCHEDULER_MAX_ABANDONED_TARGETS abandoned target threads sets its own, so it exits cleanly
# after its current task and the pool forks a replacement (jobs/worker_recycle.py). It also
# enables the `pool_restart` remote-control command; only clients of the broker can send it,
# and they can already send tasks.
CELERY_WORKER_POOL_RESTARTS = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
# Pickle from a broker is code execution.
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "scheduler"
JOB_MAX_TIMEOUT_S = env_int("SCHEDULER_JOB_MAX_TIMEOUT_S", 6 * 3600, minimum=1)
# The Redis transport redelivers an unacked message after the visibility timeout; it must
# outlast the longest job, or a healthy long run would be delivered a second time.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": JOB_MAX_TIMEOUT_S + 3600}
# Priorities (docs/limits.md, "Priorities"): one broker list per priority, 0 (highest) to 9,
# and a share of each worker's pops taken lowest priority first (broker_priority.py).
SCHEDULER_LOW_PRIORITY_SHARE = env_float("SCHEDULER_LOW_PRIORITY_SHARE", 0.1, minimum=0.0)
try:
    priority_order.as_share(SCHEDULER_LOW_PRIORITY_SHARE)
except ValueError as exc:
    raise ConfigError(f"SCHEDULER_LOW_PRIORITY_SHARE: {exc}") from None
CELERY_BROKER_TRANSPORT_OPTIONS.update(
    priority_steps=list(priority_order.BROKER_STEPS),
    low_priority_share=SCHEDULER_LOW_PRIORITY_SHARE,
)
check_redis_url(
    CELERY_BROKER_URL, name="CELERY_BROKER_URL", master_name=REDIS_SENTINEL_MASTER,
    sentinel_password=REDIS_SENTINEL_PASSWORD,
)  # fmt: skip
if is_sentinel_url(CELERY_BROKER_URL):
    # kombu's sentinel:// transport asks these sentinels for the master named here, and again
    # after a failover, when the consumer reconnects.
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        broker_transport_options(REDIS_SENTINEL_MASTER, REDIS_SENTINEL_PASSWORD)
    )
# No Celery time limit: the executor enforces each job's own timeout and records it as the
# attempt's outcome; a hard limit would kill the child before it could write that outcome.
CELERY_TASK_TIME_LIMIT = None
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# How long running attempts get to finish when the worker stops, warm (SIGTERM) or cold
# (SIGQUIT, or SIGTERM with REMAP_SIGTERM=SIGQUIT); past it the worker ends the rest itself and
# hands them back to retry_wait, due at once (jobs/worker_shutdown.py, docs/execution.md,
# "Stopping a worker"). 0 keeps Celery's unbounded warm shutdown. An idle worker also drains
# its reserved message instead of sitting on it.
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = env_float("CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT", 30.0)
CELERY_WORKER_ENABLE_SOFT_SHUTDOWN_ON_IDLE = True
# The run row is the result of an execution; results of other tasks are not read either.
CELERY_TASK_IGNORE_RESULT = True
# A broker that is down at start-up is retried rather than crashing the worker.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Dead-letter notices go to their own queue, for whatever alerts; executors never consume it.
CELERY_TASK_ROUTES = {
    "jobs.dead_letter": {
        "queue": env_str("SCHEDULER_DEAD_LETTER_QUEUE", "scheduler.dead_letters"),
    },
}

# --- Scheduler --------------------------------------------------------------------------
SCHEDULER: dict[str, Any] = {
    # Changing the partition count reassigns jobs; pick it once, well above the node count.
    "PARTITIONS": env_int("SCHEDULER_PARTITIONS", 64, minimum=1),
    "LEASE_TTL_S": env_float("SCHEDULER_LEASE_TTL_S", 10.0, minimum=0.2),
    "LEASE_RENEW_S": env_float("SCHEDULER_LEASE_RENEW_S", 3.0, minimum=0.05),
    # PostgreSQL ends a beat node's session that sits this long inside a transaction: a node
    # frozen mid-claim (SIGSTOP, a VM pause) would otherwise hold its partitions' fence rows
    # for ever and block their next owner (docs/engine.md, "A frozen node").
    "ENGINE_IDLE_TX_TIMEOUT_S": env_float("SCHEDULER_ENGINE_IDLE_TX_TIMEOUT_S", 10.0, minimum=0.5),
    "LOOKAHEAD_S": env_float("SCHEDULER_LOOKAHEAD_S", 30.0, minimum=1.0),
    "CLAIM_BATCH": env_int("SCHEDULER_CLAIM_BATCH", 1000, minimum=1),
    # Firings due within this many seconds are claimed ahead, while nothing is due, and only
    # pushed at their instant (docs/engine.md, "Claim ahead"); 0 claims each at its instant.
    "CLAIM_AHEAD_S": env_float("SCHEDULER_CLAIM_AHEAD_S", 20.0, minimum=0.0),
    # How late a claim-ahead batch may make the next armed push (docs/engine.md).
    "CLAIM_AHEAD_SLACK_S": env_float("SCHEDULER_CLAIM_AHEAD_SLACK_S", 0.03, minimum=0.0),
    # Runs claimed ahead for one instant and queue, at least this many, have their messages
    # staged in the broker at the claim and moved at the instant (docs/engine.md); 0: none.
    "STAGE_MIN_RUNS": env_int("SCHEDULER_STAGE_MIN_RUNS", 100, minimum=0),
    # While a backlog drains, claim batches shrink below CLAIM_BATCH so that one takes about
    # this long, the longest another tenant's firing waits for it (0: always CLAIM_BATCH;
    # docs/limits.md, "Fairness under a burst").
    "CLAIM_BATCH_TARGET_S": env_float("SCHEDULER_CLAIM_BATCH_TARGET_S", 0.25, minimum=0.0),
    # Of every claim backlog's order and every worker's pops, the share reserved for the
    # lowest priority waiting (docs/limits.md, "Priorities"); validated above.
    "LOW_PRIORITY_SHARE": SCHEDULER_LOW_PRIORITY_SHARE,
    "RUN_LEASE_S": env_float("SCHEDULER_RUN_LEASE_S", 30.0, minimum=1.0),
    "HEARTBEAT_S": env_float("SCHEDULER_HEARTBEAT_S", 10.0, minimum=0.1),
    # A run parked by a running limit is made due again by the next end of a run of its tenant
    # or job; this is the backstop when no release reaches it (docs/limits.md).
    "RUNNING_LIMIT_RECHECK_S": env_float("SCHEDULER_RUNNING_LIMIT_RECHECK_S", 300.0, minimum=0.1),
    "CANCEL_GRACE_S": env_float("SCHEDULER_CANCEL_GRACE_S", 5.0, minimum=0.0),
    # A target that ignores cancellation keeps its thread after its attempt ended; a pool
    # process holding this many such threads is replaced after its current run
    # (jobs/worker_recycle.py), so none holds more.
    "MAX_ABANDONED_TARGETS": env_int("SCHEDULER_MAX_ABANDONED_TARGETS", 8, minimum=1),
    "PUBLISH_SWEEP_AFTER_S": env_float("SCHEDULER_PUBLISH_SWEEP_AFTER_S", 30.0, minimum=1.0),
    # Backpressure: a beat node stops pushing to a broker queue holding this many messages
    # and holds the runs, queued in PostgreSQL, until it drains; 0 turns the bound off
    # (docs/limits.md, "Backpressure to the broker").
    "BROKER_QUEUE_MAX_DEPTH": env_int("SCHEDULER_BROKER_QUEUE_MAX_DEPTH", 100_000, minimum=0),
    # Below it, each queue's bound follows its drain rate: about this many seconds of the
    # workers' work wait in the broker (0: the fixed bound only), never fewer messages than
    # the minimum (docs/limits.md, "Backpressure to the broker").
    "BROKER_QUEUE_TARGET_WAIT_S": env_float(
        "SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", 1.0, minimum=0.0
    ),
    "BROKER_QUEUE_MIN_BOUND": env_int("SCHEDULER_BROKER_QUEUE_MIN_BOUND", 50, minimum=1),
    # How long a statement that is safe to repeat is tried again while no PostgreSQL primary
    # answers (jobs/db_failover.py): longer than a promotion takes, shorter than a run lease
    # would make a repeated outcome write pointless (docs/operations.md, "PostgreSQL failover").
    "DB_FAILOVER_WINDOW_S": env_float("SCHEDULER_DB_FAILOVER_WINDOW_S", 30.0, minimum=0.0),
    # A beat node's default id is <hostname>-<slot>, stable across restarts; several nodes on
    # one host need different slots (`beat_engine --slot N`).
    "NODE_SLOT": env_int("SCHEDULER_NODE_SLOT", 0, minimum=0),
    "DEDUP_TTL_S": env_int("SCHEDULER_DEDUP_TTL_S", 7 * 24 * 3600, minimum=60),
    # History retention (docs/history.md, "Retention"): closed dead letters and stored attempt
    # results are kept this many days, then purged by the beat node holding partition 0,
    # every HISTORY_PURGE_S, with expired dedup keys.
    "DEAD_LETTER_RETENTION_DAYS": env_int("SCHEDULER_DEAD_LETTER_RETENTION_DAYS", 30, minimum=1),
    "RESULT_RETENTION_DAYS": env_int("SCHEDULER_RESULT_RETENTION_DAYS", 30, minimum=1),
    "HISTORY_PURGE_S": env_float("SCHEDULER_HISTORY_PURGE_S", 300.0, minimum=0.1),
    # Run history partitions (docs/history.md, "Partitions"): the history duty keeps today's
    # and this many further days' partitions created. Each one costs every reader of recent
    # runs planning time, so only as many as a duty outage needs.
    "PARTITIONS_AHEAD_DAYS": env_int("SCHEDULER_PARTITIONS_AHEAD_DAYS", 2, minimum=1),
    # Runs and attempts of the last HISTORY_HOT_DAYS UTC days stay in PostgreSQL; each older
    # day is archived to files under ARCHIVE_DIR and dropped (docs/history.md, "Archive").
    "HISTORY_HOT_DAYS": env_int("SCHEDULER_HISTORY_HOT_DAYS", 30, minimum=1),
    "HISTORY_ARCHIVE_S": env_float("SCHEDULER_HISTORY_ARCHIVE_S", 86_400.0, minimum=0.1),
    "ARCHIVE_DIR": env_str("SCHEDULER_ARCHIVE_DIR", str(BASE_DIR / ".local" / "archive")),
    "PAYLOAD_MAX_BYTES": env_int("SCHEDULER_PAYLOAD_MAX_BYTES", 256 * 1024, minimum=1),
    "HTTP_ALLOWLIST": env_list("SCHEDULER_HTTP_ALLOWLIST", []),
    "HTTP_RESPONSE_MAX_BYTES": env_int("SCHEDULER_HTTP_RESPONSE_MAX_BYTES", 64 * 1024, minimum=0),
    # The longest wait an HTTP target's Retry-After (on 429/503) can impose before the next
    # attempt; the job's own retry_max_delay caps it too. Past it, a server asking for a day
    # cannot park a run for a day.
    "RETRY_AFTER_MAX_S": env_int("SCHEDULER_RETRY_AFTER_MAX_S", 3600, minimum=0),
    # Per-target rate limits (docs/limits.md, "Per-target rate limits"): how soon a worker
    # sees a changed TargetLimit row; how long a 429/503 holds a target's rate lowered, how
    # fast it then doubles back, and how low it may go (a fraction of the configured rate);
    # how many 429/503 answers one run may wait out before one counts as a failed attempt.
    "TARGET_LIMITS_REFRESH_S": env_float("SCHEDULER_TARGET_LIMITS_REFRESH_S", 5.0, minimum=0.0),
    "TARGET_COOLDOWN_S": env_float("SCHEDULER_TARGET_COOLDOWN_S", 30.0, minimum=0.0),
    "TARGET_RECOVERY_S": env_float("SCHEDULER_TARGET_RECOVERY_S", 30.0, minimum=0.001),
    "TARGET_MIN_FACTOR": env_float("SCHEDULER_TARGET_MIN_FACTOR", 1 / 16, minimum=0.001),
    "TARGET_THROTTLE_WAITS": env_int("SCHEDULER_TARGET_THROTTLE_WAITS", 5, minimum=0),
    "RUN_AT_GRACE_S": env_int("SCHEDULER_RUN_AT_GRACE_S", 300, minimum=0),
    "RUN_AT_MAX_HORIZON_DAYS": env_int("SCHEDULER_RUN_AT_MAX_HORIZON_DAYS", 5 * 366, minimum=1),
    "DEAD_LETTER_QUEUE": env_str("SCHEDULER_DEAD_LETTER_QUEUE", "scheduler.dead_letters"),
    # Recorded decision reasons (docs/operations.md, "Reasons"): a run published later than
    # this after its instant is explained as late; reasons and job events older than the
    # retention are purged by the beat nodes.
    "LATE_AFTER_S": env_float("SCHEDULER_LATE_AFTER_S", 1.0, minimum=0.0),
    "REASON_RETENTION_DAYS": env_int("SCHEDULER_REASON_RETENTION_DAYS", 30, minimum=1),
    # Notification webhooks (docs/operations.md, "Notifications"). The signing key derives
    # every webhook's secret; it is never stored in the database.
    "WEBHOOK_SIGNING_KEY": env_str("SCHEDULER_WEBHOOK_SIGNING_KEY", SECRET_KEY),
    "WEBHOOK_TIMEOUT_S": env_float("SCHEDULER_WEBHOOK_TIMEOUT_S", 5.0, minimum=0.1),
    "WEBHOOK_MAX_ATTEMPTS": env_int("SCHEDULER_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1),
    "WEBHOOK_RETRY_BASE_S": env_float("SCHEDULER_WEBHOOK_RETRY_BASE_S", 10.0, minimum=0.001),
    "WEBHOOK_RETRY_MAX_S": env_float("SCHEDULER_WEBHOOK_RETRY_MAX_S", 3600.0, minimum=0.001),
    # Sustained lateness: p99 of lateness over the window above LATENESS_ALERT_S, on at least
    # LATENESS_ALERT_MIN_RUNS runs, notifies once per window.
    "LATENESS_ALERT_S": env_float("SCHEDULER_LATENESS_ALERT_S", 1.0, minimum=0.0),
    "LATENESS_ALERT_WINDOW_S": env_int("SCHEDULER_LATENESS_ALERT_WINDOW_S", 300, minimum=10),
    "LATENESS_ALERT_MIN_RUNS": env_int("SCHEDULER_LATENESS_ALERT_MIN_RUNS", 10, minimum=1),
}
# --- Metrics (docs/operations.md, "Scraping") -------------------------------------------
# The web serves /metrics; each beat node and each worker host serves its own on a port
# (0: none), on this address (loopback unless Prometheus scrapes from another host).
SCHEDULER_METRICS_ADDR = env_str("SCHEDULER_METRICS_ADDR", "127.0.0.1")
SCHEDULER_BEAT_METRICS_PORT = env_int("SCHEDULER_BEAT_METRICS_PORT", 0, minimum=0)
SCHEDULER_WORKER_METRICS_PORT = env_int("SCHEDULER_WORKER_METRICS_PORT", 0, minimum=0)

# Modules of client code that register callable targets and declare schedules.
SCHEDULER_CLIENT_MODULES = env_list("SCHEDULER_CLIENT_MODULES", ["scheduler_project.demo"])

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "UNAUTHENTICATED_USER": None,
    # Per-tenant budget for /v1 requests (jobs.api.throttling); empty disables throttling.
    "DEFAULT_THROTTLE_RATES": {"tenant": env_str("SCHEDULER_API_RATE", "6000/min")},
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Scheduler API",
    "DESCRIPTION": "Register cron, interval and one-off jobs; inspect runs and dead letters.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}
