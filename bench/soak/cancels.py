"""Random cancels during the soak, half through the REST API and half through the services.

A cancel counts as acknowledged once the API answered 200/202 (or the service returned True),
or, when the call failed, once the database shows it took effect anyway. Right after the
acknowledgement the attempts that exist are noted: any other attempt of that run (or job) is
an attempt after cancel (docs/architecture.md, Invariants: *cancel is final*).
"""

from __future__ import annotations

import random
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from bench.soak.accounting import CancelRecord

# Running runs first: those are the ones a worker kill or the lease reaper could restart.
RUN_STATES = ("running", "running", "retry_wait", "queued")


@dataclass
class Canceller:
    tenant_id: int
    api_key: str
    rng: random.Random
    records: list[CancelRecord] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    refused: int = 0  # the run or job had moved on (409): nothing to check

    def __post_init__(self) -> None:
        from django.test import Client

        # A 500 comes back as a response to count, not as an exception in the harness.
        self.client = Client(raise_request_exception=False)
        self.headers = {"Authorization": f"Bearer {self.api_key}"}

    def _pick(self, states: tuple[str, ...], count: int = 50) -> tuple[uuid.UUID, uuid.UUID] | None:
        from jobs.models import JobRun

        state = self.rng.choice(states)
        rows = list(
            JobRun.objects.filter(tenant_id=self.tenant_id, state=state)
            .values_list("id", "job_id")[:count]
        )  # fmt: skip
        return self.rng.choice(rows) if rows else None

    def _attempts(self, **where: object) -> frozenset[tuple[str, int]]:
        from jobs.models import RunAttempt

        rows = RunAttempt.objects.filter(**where).values_list("run_id", "attempt")
        return frozenset((str(run), int(attempt)) for run, attempt in rows)

    def _note_error(self, what: str, detail: str) -> None:
        self.errors[f"{what}: {detail[:120]}"] += 1

    def cancel_run(self) -> None:
        picked = self._pick(RUN_STATES)
        if picked is not None:
            self._cancel_run(*picked)

    def before_worker_kill(self, pids: frozenset[int]) -> str:
        """The cases a kill makes hardest: a running run cancelled, then its worker killed; a
        job deleted while its run is mid-flight, then that run's worker killed."""
        from jobs.models import JobRun

        host = socket.gethostname()
        rows = list(
            JobRun.objects.filter(
                tenant_id=self.tenant_id, state="running", worker__in=[f"{host}:{p}" for p in pids]
            ).values_list("id", "job_id")[:50]
        )  # fmt: skip
        self.rng.shuffle(rows)
        before = len(self.records)
        if rows:
            self._cancel_run(*rows[0])
        if len(rows) > 1:
            self._cancel_job(rows[1][1])
        done = [f"{r.kind} {r.run_id or r.job_id}" for r in self.records[before:]]
        return f"{len(rows)} running on it; cancelled: {', '.join(done) or 'none'}"

    def _cancel_run(self, run_id: uuid.UUID, job_id: uuid.UUID) -> None:
        from beat_engine.clock import SystemClock
        from jobs.models import JobRun
        from jobs.services.runs import run_request_cancel

        try:
            if self.rng.random() < 0.5:
                response = self.client.post(
                    f"/v1/runs/{run_id}/cancel", "", content_type="application/json",
                    headers=self.headers,
                )  # fmt: skip
                ok = response.status_code in (200, 202)
                if response.status_code not in (200, 202, 409):
                    detail = response.content.decode(errors="replace")
                    self._note_error("run cancel (API)", f"HTTP {response.status_code} {detail}")
            else:
                ok = run_request_cancel(run_id=run_id, now=SystemClock().now())
        except Exception as exc:  # noqa: BLE001 - counted; then the database says what happened
            self._note_error("run cancel (service)", f"{type(exc).__name__}: {exc}")
            ok = False
        if not ok:
            run = JobRun.objects.filter(id=run_id).values("state", "cancel_requested").first()
            ok = run is not None and (run["state"] == "cancelled" or run["cancel_requested"])
            if not ok:
                self.refused += 1
                return
        acked = time.time()
        self.records.append(
            CancelRecord("run", str(job_id), str(run_id), acked, self._attempts(run_id=run_id))
        )

    def cancel_job(self) -> None:
        picked = self._pick(("running", "retry_wait"))
        if picked is not None:
            self._cancel_job(picked[1])

    def _cancel_job(self, job_id: uuid.UUID) -> None:
        from jobs.models import Job

        response = self.client.delete(f"/v1/jobs/{job_id}", headers=self.headers)
        if response.status_code != 200:
            detail = response.content.decode(errors="replace")
            self._note_error("job cancel (API)", f"HTTP {response.status_code} {detail}")
            if (
                Job.objects.filter(id=job_id).values_list("status", flat=True).first()
                != "cancelled"
            ):
                return
        acked = time.time()
        self.records.append(
            CancelRecord("job", str(job_id), None, acked, self._attempts(run__job_id=job_id))
        )

    @property
    def cancelled_runs(self) -> set[str]:
        return {r.run_id for r in self.records if r.kind == "run" and r.run_id}

    @property
    def job_cancels(self) -> dict[str, float]:
        first: dict[str, float] = {}
        for record in self.records:
            if record.kind == "job":
                first.setdefault(record.job_id, record.acked_at)
        return first
