"""The prose of the report: how each figure is measured, and what to keep in mind."""

from __future__ import annotations

from bench.compare.contender import Contender
from bench.compare.workload import FAILOVER_LEASE_S, FAILOVER_RENEW_S, REDBEAT_MAX_LOOP_S


def method(chosen: list[Contender]) -> list[str]:
    lines = [
        "- Every scheduler runs on the same machine, against the same embedded PostgreSQL and "
        "Redis (Unix sockets), one after the other within each repetition; Redis is flushed "
        "and the jobs re-registered before every run.",
        "- **Workload.** `registered` jobs, of which the first `due` fire at one instant and "
        "the rest twelve hours later. Every job is an interval of one day whose previous "
        "firing was one day before its instant: celery beat and django-celery-beat get "
        "`last_run_at = instant - 1 day` (celery's `schedule.is_due` is true once "
        "`last_run_at + run_every <= now`), RedBeat the same `last_run_at` in its meta and the "
        "instant as its sorted-set score (its tick reads entries scored up to now), ours "
        "`anchor_at = next_fire_at = instant`. So the instant can be any second: each run "
        "aims it at registration's expected end plus the case's start-up budget, and the "
        "scheduler is started right after registration, i.e. before the instant. The start-up "
        "budget (spawn to instant) is 6 s for 1,000 due, 8 s for 10,000 and 22 s for 50,000: "
        'ours claims a spike ahead of its instant (docs/engine.md, "Claim ahead") at about '
        "3,600 firings/s on one node, so 50,000 need about 14 s of its 20 s window, as they "
        "have in a deployment whose nodes run when the window opens; the peers do nothing "
        "ahead, so the budget changes nothing for them.",
        "- **Registration**, not timed, as fast as each peer's storage allows: celery beat's "
        "PersistentScheduler gets its entries from `beat_schedule` in the beat process (a fresh "
        "shelve file each run; a pre-built shelve would save nothing, `merge_inplace` rebuilds "
        "every entry from `beat_schedule` at start-up, so that work is in its start-up time); "
        "django-celery-beat gets `PeriodicTask` rows and ours `jobs_job` rows by one "
        "`INSERT ... SELECT` copying a row the ORM created (ours: ids and partitions streamed "
        "by `COPY`); RedBeat gets the same Redis hash and sorted-set writes as "
        "`RedBeatSchedulerEntry.save()`, pipelined. Every run registers afresh (Redis is "
        "flushed, the tables emptied), so no run inherits another's state.",
        "- **Deadlines.** A spike or registrations run ends when every due message is in the "
        "broker (plus 3 s to catch late duplicates) or 75 s after the instant, whichever is "
        "first; a scheduler still publishing then is reported as *did not finish*, with what "
        "it published and the fraction within 60 s. A case may cap start-up (1,000,000 "
        "registered: 120 s from spawn); a scheduler not started by then is stopped and "
        "reported as *did not start*.",
        "- **Messages** are counted in the broker: after the run every Celery message left in "
        "the queues is decoded (kombu envelope, protocol-2 body) to the job it fires. "
        "No worker consumes them. *Duplicates*: messages beyond the first for a job; "
        "*misses*: due jobs with no message by the deadline. *Re-sent* (ours only): further "
        "messages of a run already sent, the same run id. Our engine publishes at least once: "
        "runs pushed but not yet marked published when their node died are sent again by the "
        "next owner; the worker's compare-and-set on the run's state runs such a run once, so "
        "they are reported apart, not as duplicates (two runs for one instant would be).",
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
        "(`sched:lease:{partition}` in Redis) at that instant; lease TTL "
        f"{FAILOVER_LEASE_S:g} s (`SCHEDULER_LEASE_TTL_S`, renewed every {FAILOVER_RENEW_S:g} "
        "s; `BENCH_FAILOVER_LEASE_S` sets it, 10 s by default as the engine's). The jobs use "
        "`catchup_policy=replay_all`, so the survivor, once the victim's leases expired, "
        "fires every firing missed meanwhile (the default `skip` would fire only the latest "
        "of each job and count the rest as missed). RedBeat: two `celery beat` processes, "
        "the second blocked on RedBeat's lock `redbeat::lock`; the victim is the one that "
        f"ticked. `redbeat_lock_timeout` is set to {FAILOVER_LEASE_S:g} s like our TTL (its "
        "default is 5 x `beat_max_loop_interval`), and `beat_max_loop_interval` to "
        f"{REDBEAT_MAX_LOOP_S:g} s, which is also how often the standby retries the lock "
        "(celery's default, 300 s, would leave it blocked for minutes) and the longest the "
        "holder sleeps between the ticks that extend its lock, so it stays below the lock "
        "timeout. RedBeat has no catch-up: after the takeover each overdue "
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
        "- **Repetitions.** Every figure is the median of the profile's repetitions, with min "
        "and max. Where celery beat and django-celery-beat run into the deadline every time "
        "(spikes of 10,000 and 50,000, steady) they repeat twice, and the registrations case "
        "(1,000,000 registered) runs twice for everyone; a scheduler with fewer repetitions "
        "than its table's others is marked so.",
    ]
    return lines


def caveats() -> list[str]:
    return [
        "- A 2-core machine shared with other work: absolute figures move between runs; "
        "compare within a run.",
        "- Beat processes log at WARNING; celery beat logs an INFO line per message by "
        "default, which would slow the peers further.",
        "- **Interval, not crontab.** Stock celery beat could aim many entries at one "
        "instant only with a crontab, i.e. at a minute boundary, so earlier runs used "
        "crontabs (and waited for a minute boundary every run). Intervals with an explicit "
        "last run reach every scheduler the same way at any second. They are also cheaper per "
        "entry than crontabs for every scheduler: celery's `crontab.is_due` walks the cron "
        "fields where `schedule.is_due` subtracts, and ours evaluates a cron expression in "
        "the job's time zone where an interval is arithmetic; so these figures are for "
        "interval jobs, crontab users should expect more per-entry cost, and figures from "
        "the crontab runs are not comparable. django-celery-beat 2.9 loads only crontab "
        "tasks whose hour is within two hours of now (`_get_crontab_exclude_query`); "
        "interval tasks are all loaded, so with 1,000,000 registered it holds them all, as "
        "celery beat does.",
        "- *Steady* uses interval schedules with first firings spread evenly over one period "
        "(peers: `last_run_at` one period before; ours: `anchor_at`). The peers' intervals "
        "re-anchor at each send, so their lateness is against their own due time (previous "
        "send + period) and drift is not held against them; misses and duplicates are "
        "counted only for ours (anchored grid). RedBeat's first firings are staggered by "
        "writing its meta and scores directly, the scores in whole seconds as RedBeat "
        "itself writes them (fractional scores made its tick sleep a whole max interval "
        "and then fire in bursts; the last full run left RedBeat out of steady for that).",
        "- *CPU* and *CPU per 1,000 firings* include start-up and the idle wait before the "
        "due instant, which dominates cases with few due jobs.",
        "- *Failover*, ours: a run the killed node had claimed but not yet published is sent "
        "by the survivor as soon as it takes the partition (earlier engines waited for the "
        "periodic sweep, 30 s after the claim, and quick runs that ended 20 s after the kill "
        "counted that firing as missed); one it had pushed but not yet marked is sent again "
        "then, and counted as *re-sent*.",
        "- *Failover*, ours, in the full run of 2026-11-30 05:52: *max after kill* 60.1 s is "
        "not a late firing. No worker consumes the messages here, so our runs stay queued and "
        "the sweep pushes them again `republish_after_s` (60 s) after their push; the "
        "benchmark then read `published_at`, which holds the latest push. It now reads the "
        "first push (`due_at + lateness`). Only runs pushed in the first seconds reach "
        "that age before the run ends, under 1% of those after the kill: the p99 after kill "
        "(9.5 s) is the firings owed while the victim's leases ran out.",
        "- *Failover*, RedBeat at 1,000 firings/s: in every full run its lock lapsed before "
        "the planned kill, so the table has no takeover figures for it. RedBeat extends its "
        "lock once per tick (`RedBeatScheduler.tick`); a tick that sends the due backlog at "
        "~1,000-1,200 messages/s outlasts the 10 s lock timeout set here to match our lease "
        "TTL, the lock lapses, the standby takes it and ticks too, and the holder's next "
        "extend raises (`LockNotOwnedError: Cannot extend a lock that's no longer owned`) and "
        "it exits. Until the run of 2026-12-04 the holder had exited about 6 s after the first "
        "firings; in that of 2026-12-07 both beats had ticked by the kill instant in each "
        "repetition, no single process held the work, and the run is reported with that error "
        "(a finding about the peer, as its exit was). "
        "With its default timeout (25 minutes at the default loop interval) it would hold the "
        "lock, and a takeover would take that long. The quick profile's failover runs at 200 "
        "firings/s, which RedBeat sustains, and has takeover figures.",
        "- *Failover* is one kill per run, at one instant of the lease/lock cycle: resume "
        f"time varies by up to the renewal period (ours {FAILOVER_RENEW_S:g} s; RedBeat's "
        f"standby polls every {REDBEAT_MAX_LOOP_S:g} s) between repetitions. In quick runs at "
        "200 firings/s RedBeat once published "
        "nothing for 5 s (its max loop interval) before the kill and then caught up in a "
        "burst; not traced yet. After a takeover its entries, all re-anchored at the "
        "catch-up instant, fire in one burst every period.",
        "- celery beat and django-celery-beat compare their whole schedule on every tick "
        "(`Scheduler.tick` calls `schedules_equal`) and send one message per tick, so their "
        "rate falls as the number of entries grows; with 10,000 or more entries they are cut "
        "off at the deadline, and their *within 60 s* is the figure to read.",
    ]


def how_to_run() -> list[str]:
    return [
        "- `make bench-compare` (or `scripts/bench-compare`): the full profile (about 70 "
        "minutes on 2 cores; the expected duration is printed at start); creates "
        "`bench/.venv-peers` with the pinned peers on first use, starts embedded PostgreSQL "
        "and Redis under `.local/bench-compare` (or uses `DATABASE_URL`/`REDIS_URL`), and "
        "rewrites this section, `docs/benchmarks.json` and `docs/img/compare-*.png`.",
        "- `scripts/bench-compare --quick` (`make bench-compare-quick`): the CI-sized profile, "
        "about 5 minutes, run by `.ci/run` after the tests and lint. It exits non-zero on any "
        "error, on firings of jobs that were not due, and on duplicates or misses of ours, "
        "never on timing; a peer's misses or duplicates are printed as findings instead. It "
        "writes its report under `.local/bench-compare/report/`, so CI never rewrites the "
        "docs.",
        "- `--only ours-1 redbeat` runs a subset, `--scenarios spike failover` some scenarios; "
        "`--docs DIR` writes the report elsewhere. `--scenarios e2e` alone rewrites only the "
        "end-to-end subsection and its records (`flock /tmp/bench.lock scripts/bench-compare "
        "--scenarios e2e`, about 20 minutes); `BENCH_E2E_CONCURRENCY` sets its processes per "
        "worker.",
    ]
