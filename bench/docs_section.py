"""Rewrites one `## Title` section of docs/benchmarks.md and one source's records in
docs/benchmarks.json, leaving the others as they are."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BENCHMARKS_JSON = BENCHMARKS_MD.with_suffix(".json")


def replace_section(title: str, body: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the section headed ``## {title}`` with ``body`` (which starts with that heading)."""
    if not body.startswith(f"## {title}\n"):
        raise ValueError(f"section body must start with '## {title}'")
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    section = body.rstrip("\n") + "\n\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n")


def replace_records(
    source: str, records: Sequence[dict[str, Any]], path: Path = BENCHMARKS_JSON
) -> None:
    """Replace the records whose ``source`` is ``source`` with ``records``, keeping the others."""
    existing = json.loads(path.read_text()) if path.exists() else {"records": []}
    kept = [rec for rec in existing.get("records", []) if rec.get("source") != source]
    path.write_text(json.dumps({"records": kept + list(records)}, indent=1) + "\n")
