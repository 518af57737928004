# Each target wraps a script, so the README, CI and developers run the same thing.
.PHONY: install run test test-unit test-integration test-faults lint fmt check bench bench-compare bench-compare-quick soak soak-quick screenshots

install:
	./scripts/install

run:
	./scripts/run

test:
	./scripts/test

test-unit:
	./scripts/test tests/unit

test-integration:
	./scripts/test tests/integration

test-faults:
	./scripts/test tests/faults

# The browser test, saving its screenshots over the docs' (docs/img/status-*.png).
screenshots:
	STATUS_SCREENSHOTS_DIR=docs/img ./scripts/test tests/browser -q

lint:
	./scripts/lint

fmt: install
	.venv/bin/ruff format .
	.venv/bin/ruff check --fix .

check: lint test-unit

bench:
	./scripts/bench

# Ours against celery beat, django-celery-beat and RedBeat; rewrites docs/benchmarks.md's section.
bench-compare:
	./scripts/bench-compare

# The CI-sized profile (about 4 minutes): fails on errors and on duplicates or misses of ours,
# never on timing.
bench-compare-quick:
	./scripts/bench-compare --quick

# 30 minutes of firings under beat/worker kills, Redis restarts and cancels; rewrites the Soak
# section of docs/benchmarks.md. Fails on lost firings, duplicate effects or attempts after
# cancel, never on lateness.
soak:
	.venv/bin/python bench/soak.py --write-docs

# The CI-sized soak (about 4 minutes with start-up and drain), writing no docs.
soak-quick:
	.venv/bin/python bench/soak.py --quick
