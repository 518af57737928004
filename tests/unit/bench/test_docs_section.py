"""The benchmarks' writers replace their own part of docs/benchmarks.md and .json only."""

from __future__ import annotations

import json
from pathlib import Path

from bench.docs_section import replace_records, replace_section


def test_replace_records_keeps_the_other_sources(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    replace_records("a", [{"source": "a", "value": 1}], path)
    replace_records("b", [{"source": "b", "value": 2}], path)
    replace_records("a", [{"source": "a", "value": 3}, {"source": "a", "value": 4}], path)
    records = json.loads(path.read_text())["records"]
    assert records == [
        {"source": "b", "value": 2},
        {"source": "a", "value": 3},
        {"source": "a", "value": 4},
    ]


def test_replace_section_keeps_the_other_sections(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    replace_section("One", "## One\nfirst\n", path)
    replace_section("Two", "## Two\nsecond\n", path)
    replace_section("One", "## One\nagain\n", path)
    assert path.read_text() == "# Benchmarks\n\n## One\nagain\n\n## Two\nsecond\n"
