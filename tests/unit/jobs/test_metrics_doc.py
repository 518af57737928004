"""docs/operations.md lists exactly the metrics the code registers, with their types and labels."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from prometheus_client import REGISTRY

import beat_engine
import jobs

DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
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


def _registered() -> dict[str, tuple[str, frozenset[str]]]:
    # Every module of the project's packages, so a metric defined anywhere is found.
    for package in (jobs, beat_engine):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".migrations" not in module.name:
                importlib.import_module(module.name)
    found: dict[str, tuple[str, frozenset[str]]] = {}
    collectors = REGISTRY._collector_to_names  # what register() recorded, per collector
    for collector in list(collectors):
        describe = getattr(collector, "describe", None)
        for family in describe() if describe is not None else []:
            if not family.name.startswith("scheduler_"):
                continue
            name = family.name + "_total" if family.type == "counter" else family.name
            labels = frozenset(getattr(collector, "_labelnames", ()))
            found[name] = (family.type, labels)
    return found


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
