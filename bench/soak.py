"""Soak benchmark: 30 minutes of firings under beat/worker kills, Redis restarts and cancels.

    .venv/bin/python bench/soak.py [--quick] [--minutes 30] [--rate 200] [--seed 1] [--write-docs]

Starts its own embedded PostgreSQL and Redis under .local/soak-<profile>, two beat nodes, two
Celery workers and a local HTTP target keeping a ledger; prints lost firings, duplicate
effects, attempts after cancel and lateness, and with --write-docs replaces the "## Soak"
section of docs/benchmarks.md. The code is the bench/soak/ package (this file only puts the
checkout on the path: run as a script, `bench.soak` resolves to that package).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak.main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
