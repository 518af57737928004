"""docs/operations.md lists exactly the metrics the code registers, with their types and labels."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "operations.md"
ROW = re.compile(
    r"^\| `(scheduler_[a-z_]+)` \| (counter|gauge|histogram) \|\s*([a-z_, ]*?)\s*\|", re.M
)


def _documented() -> dict[str, tuple[str, frozenset[str]]]:
    text = DOC.read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = ROW.findall(section)
    names = [name for name, _kind, _labels in rows]
    assert len(names) == len(set(names)), "a metric is listed twice"
    return {
        name: (kind, frozenset(label.strip() for label in labels.split(",") if label.strip()))
        for name, kind, labels in rows
    }


# Run apart: importing every module of the project (to find a metric defined anywhere) in the
# test process would register Celery tasks and client targets a second time beside the tests'.
_LIST_METRICS = """
import importlib, json, pkgutil
import django
django.setup()
import beat_engine, jobs
from prometheus_client import REGISTRY
for package in (jobs, beat_engine):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if ".migrations" not in module.name:
            importlib.import_module(module.name)
found = {}
for collector in list(REGISTRY._collector_to_names):
    describe = getattr(collector, "describe", None)
    for family in describe() if describe is not None else []:
        if family.name.startswith("scheduler_"):
            name = family.name + "_total" if family.type == "counter" else family.name
            found[name] = [family.type, sorted(getattr(collector, "_labelnames", ()))]
print(json.dumps(found))
"""


def _registered() -> dict[str, tuple[str, frozenset[str]]]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    done = subprocess.run(
        [sys.executable, "-c", _LIST_METRICS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: (kind, frozenset(labels)) for name, (kind, labels) in listed.items()}


def test_every_registered_metric_is_documented_with_its_type_and_labels() -> None:
    documented, registered = _documented(), _registered()
    assert len(documented) >= 30
    missing = {n: registered[n] for n in registered.keys() - documented.keys()}
    stale = {n: documented[n] for n in documented.keys() - registered.keys()}
    assert not missing, f"registered but not in docs/operations.md: {missing}"
    assert not stale, f"in docs/operations.md but not registered: {stale}"
    wrong = {
        name: (documented[name], registered[name])
        for name in documented
        if documented[name] != registered[name]
    }
    assert not wrong, f"type or labels differ (doc, code): {wrong}"
