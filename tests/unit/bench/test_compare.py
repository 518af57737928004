"""The comparison benchmark's bookkeeping: message decoding, percentiles, docs splicing.

The benchmark itself needs minutes of wall time (real schedulers, real seconds), so CI runs
it as ``scripts/bench-compare --quick`` after the tests, not as a test; these checks are the
parts that can be wrong without any timing.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from beat_engine.publisher import QueuedRun, build_message
from bench.compare.metrics import percentile
from bench.compare.report import END, START, TITLE, splice
from bench.compare.runner import decode


def test_decode_reads_args_of_the_engines_own_message() -> None:
    run_id = uuid.uuid4()
    raw = build_message(QueuedRun(run_id, 1, 0, "scheduler", 5), origin="bench")

    assert decode(raw.encode()) == [str(run_id), 1]


@pytest.mark.parametrize(
    ("q", "expected"),
    [(0.5, 50.0), (0.99, 99.0), (1.0, 100.0), (0.0, 1.0)],
)
def test_percentile_is_nearest_rank(q: float, expected: float) -> None:
    assert percentile([float(x) for x in range(1, 101)], q) == expected


def test_splice_replaces_only_our_section(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n## Beat engine\n\nkeep me\n")

    splice(path, f"{TITLE}\n\nfirst\n")
    splice(path, f"{TITLE}\n\nsecond\n")

    text = path.read_text()
    assert "keep me" in text
    assert "first" not in text
    assert text.count(START) == text.count(END) == 1
    assert text.index(TITLE) < text.index(START) < text.index("second") < text.index(END)


def test_splice_survives_a_neighbour_rewriting_up_to_our_heading(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    splice(path, f"{TITLE}\n\nold\n")
    # Another benchmark replaces "## Beat engine" up to the next "## ", i.e. our heading.
    path.write_text("## Beat engine\n\nnew figures\n\n" + path.read_text())

    splice(path, f"{TITLE}\n\nnew\n")

    text = path.read_text()
    assert "new figures" in text
    assert "old" not in text
    assert text.count(TITLE) == 1


def test_messages_of_one_run_count_once_and_as_resent() -> None:
    from bench.compare.contender import Firing
    from bench.compare.runner import collapse_resent

    firings = [
        Firing("job-0000001", 1.0, 0.0, 3, "run-a"),
        Firing("job-0000001", 9.0, 0.0, 3, "run-a"),  # the next owner's sweep
        Firing("job-0000001", 2.0, 0.0, 3, "run-b"),  # a second run for one instant
        Firing("job-0000002", 1.0),  # peers: no run id, every message a firing
        Firing("job-0000002", 1.5),
    ]
    kept, resent = collapse_resent(firings)
    assert resent == 1
    assert [(f.name, f.run_id) for f in kept] == [
        ("job-0000001", "run-a"), ("job-0000001", "run-b"),
        ("job-0000002", None), ("job-0000002", None),
    ]  # fmt: skip
