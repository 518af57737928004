"""The prose of the report: how each figure is measured, and what to keep in mind."""

from __future__ import annotations

from bench.compare.contender import Contender


def method(chosen: list[Contender]) -> list[str]:
    lines = [
        "- Every scheduler runs on the same machine, against the same embedded PostgreSQL and "
        "Redis (Unix sockets), one after the other within each repetition; Redis is flushed "
        "and the jobs re-registered before every run.",
        "- **Workload.** `registered` jobs, of which the first `due` fire at one instant and "
        "the rest twelve hours later. Stock celery beat can only aim many entries at one "
        "instant with a crontab, so every scheduler gets `crontab(minute=M, hour=H)` (ours: "
        "`M H * * *`), with the instant the first minute boundary that leaves the case's "
        "start-up budget after registration. The scheduler is started right after "
        "registration, i.e. before the instant.",
        "- **Registration**, not timed: celery beat's PersistentScheduler gets its entries "
        "from `beat_schedule` (a fresh shelve file each run); django-celery-beat gets "
        "`PeriodicTask` rows by `bulk_create`; RedBeat gets the same Redis hash and sorted "
        "set writes as `RedBeatSchedulerEntry.save()`, pipelined; ours gets `jobs_job` rows "
        "by `bulk_create` with `next_fire_at` set.",
        "- **Messages** are counted in the broker: after the run every Celery message left in "
        "the queues is decoded (kombu envelope, protocol-2 body) to the job it fires. "
        "No worker consumes them. *Duplicates*: messages beyond the first for a job; "
        "*misses*: due jobs with no message by the deadline.",
        "- **Lateness** of a job: its publish timestamp minus the due instant. *Last msg*: "
        "lateness of the last due job (time until the last message was in the broker). "
        "*Firings/s*: due jobs divided by that time. *Within 60 s*: fraction of due jobs "
        "published within 60 s of the instant.",
        "- **Publish timestamps**:",
        *[f"  - {c.name}: {c.timestamp_meaning}." for c in chosen],
        "- **Resources**: psutil samples the scheduler process(es) every 0.2 s; *peak RSS* "
        "is the largest resident set (summed over nodes for two nodes), *CPU* the user+system "
        "seconds from spawn to the end of the run (so start-up is included).",
        "- **Start-up**: spawn to the scheduler's first tick (peers: a one-shot marker the "
        "benchmark's Celery app writes from the scheduler's `tick`), or to the first "
        "partition lease in Redis (ours).",
        "- **Failover** (ours-2 and RedBeat; the others have no takeover): the steady "
        "workload with a `kill -9` of the process holding the work at `kill at` seconds. "
        "Ours: two nodes, and the victim is the one holding most partition leases "
        "(`sched:lease:{partition}` in Redis) at that instant; lease TTL 10 s "
        "(`SCHEDULER_LEASE_TTL_S`, the default, renewed every 3 s). The jobs use "
        "`catchup_policy=replay_all`, so the survivor, once the victim's leases expired, "
        "fires every firing missed meanwhile (the default `skip` would fire only the latest "
        "of each job and count the rest as missed). RedBeat: two `celery beat` processes, "
        "the second blocked on RedBeat's lock `redbeat::lock`; the victim is the one that "
        "ticked. `redbeat_lock_timeout` is set to 10 s like our TTL (its default is 5 x "
        "`beat_max_loop_interval`), and `beat_max_loop_interval` to 5 s, which is also how "
        "often the standby retries the lock (celery's default, 300 s, would leave it "
        "blocked for minutes). RedBeat has no catch-up: after the takeover each overdue "
        "entry fires once, at once, and re-anchors its interval there.",
        "- *Resume*: kill to the first publish of a firing from the victim's work (ours: "
        "jobs in its partitions, the survivor's own keep firing; RedBeat: any). *Missed*, "
        "ours: anchored instants due up to 2 s before the end with no message; RedBeat "
        "(re-anchoring): per entry, a gap of g seconds between two sends owes "
        "floor(g / period) - 1 firings, plus those owed after its last send. *Duplicates*: "
        "an instant fired twice (ours), sends of one entry less than half a period apart "
        "(RedBeat). *After kill*: lateness of everything published after the kill, catch-up "
        "included; *settled*: of what was published more than one period after resuming. "
        "Publish logs of the RedBeat beats are written line by line, so a kill loses none.",
        "- **Ratios** (ours / best peer) are taken pair by pair within one repetition, then "
        "the median over repetitions, since absolute times drift on a shared machine.",
    ]
    return lines


def caveats() -> list[str]:
    return [
        "- A 2-core machine shared with other work: absolute figures move between runs; "
        "compare within a run.",
        "- Beat processes log at WARNING; celery beat logs an INFO line per message by "
        "default, which would slow the peers further.",
        "- The crontab due instant is a minute boundary, so every run waits up to a minute "
        "before its instant; that wait is not in any figure except CPU and start-up.",
        "- *Steady* uses interval schedules with first firings spread evenly over one period "
        "(peers: `last_run_at` one period before; ours: `anchor_at`). The peers' intervals "
        "re-anchor at each send, so their lateness is against their own due time (previous "
        "send + period) and drift is not held against them; misses and duplicates are "
        "counted only for ours (anchored grid). RedBeat's first firings are staggered by "
        "writing its meta and scores directly, the scores in whole seconds as RedBeat "
        "itself writes them (fractional scores made its tick sleep a whole max interval "
        "and then fire in bursts; the last full run left RedBeat out of steady for that).",
        "- Known defects of the last full run (2026-11-30): django-celery-beat published "
        "nothing in the first 1,000-spike repetition (the other two published all 1,000; "
        "that run followed an ORM delete of 10,000 leftover rows, since replaced by a raw "
        "delete; not diagnosed further), and its steady run has no figures: its "
        "registration spent minutes in the same per-row ORM delete of 100,000 rows and was "
        "stopped by hand. *CPU* and *CPU per 1,000 firings* include start-up and the idle "
        "wait before the due instant, which dominates cases with 100 due jobs.",
        "- *Failover* is one kill per run, at one instant of the lease/lock cycle: resume "
        "time varies by up to the renewal period (ours 3 s; RedBeat's standby polls every "
        "5 s) between repetitions. In quick runs at 200 firings/s RedBeat once published "
        "nothing for 5 s (its max loop interval) before the kill and then caught up in a "
        "burst; not traced yet. After a takeover its entries, all re-anchored at the "
        "catch-up instant, fire in one burst every period.",
        "- Sizes are below the issue's: the full profile stops at 10,000 due and 100,000 "
        "registered, runs steady for 30 s rather than 60 s, and repeats only the 1,000 spike "
        "three times, to fit about 40 minutes on this machine. At the ~20 firings/s that "
        "celery beat and django-celery-beat reach with many entries, 50,000 due would take "
        "about 40 minutes per repetition; 1,000,000 registered is left to a longer run "
        "(edit `bench/compare/workload.py`).",
    ]


def how_to_run() -> list[str]:
    return [
        "- `make bench-compare` (or `scripts/bench-compare`): the full profile; creates "
        "`bench/.venv-peers` with the pinned peers on first use, starts embedded PostgreSQL "
        "and Redis under `.local/bench-compare` (or uses `DATABASE_URL`/`REDIS_URL`), and "
        "rewrites this section, `docs/benchmarks.json` and `docs/img/compare-*.png`.",
        "- `scripts/bench-compare --quick`: the CI-sized profile (about 10 minutes, most of "
        "it waiting for minute boundaries, hence not part of the pytest suite). It exits "
        "non-zero on errors, duplicates, misses or firings of jobs that were not due, never "
        "on timing, and writes its report under `.local/bench-compare/report/` so CI never "
        "rewrites the docs. A CI job can run it after `.ci/run`.",
        "- `--only ours-1 redbeat` runs a subset; `--docs DIR` writes the report elsewhere.",
    ]
