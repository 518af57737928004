"""Whether this process runs under gevent's monkey-patching: ``celery worker -P gevent``
patches before anything else, the settings included, is imported (docs/execution.md, "Worker
pools")."""

from __future__ import annotations

import sys


def under_gevent() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))
