"""Rewrites one `## Title` section of docs/benchmarks.md, leaving the others as they are."""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


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
