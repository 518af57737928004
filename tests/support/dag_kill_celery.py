"""`python -m tests.support.dag_kill_celery <celery arguments>`: a Celery worker that SIGKILLs
itself, main process and pool alike, the moment a parent's outcome has committed with its
children's runs: after the commit, before it wakes the engine and before the message is acked.

That is the crash between a parent's success and its child's start. The hook is the one call
the worker makes right after such a commit (jobs.services.dag_handoff.wake_children, whose
argument lists the children's partitions), patched in each pool process as it starts.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from celery.signals import worker_process_init


def _kill_after_handoff(**_: Any) -> None:
    from jobs.services import dag_handoff

    original = dag_handoff.wake_children

    def killed(partitions: list[int]) -> None:
        if partitions:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        original(partitions)

    dag_handoff.wake_children = killed


def main() -> None:
    worker_process_init.connect(_kill_after_handoff, weak=False)
    from celery.__main__ import main as celery_main

    sys.argv[0] = "celery"
    celery_main()


if __name__ == "__main__":
    main()
