"""The end-to-end scenario's bookkeeping: the target's ledger, counting at the target, and the
subsection it rewrites on its own. The runs themselves are ``scripts/bench-compare``'s."""

from __future__ import annotations

import json
from pathlib import Path

from bench.compare.e2e_count import count_at_target, ledger_line, parse_ledger
from bench.compare.http_target import firing_of
from bench.compare.report import E2E_END, E2E_START, END, TITLE, splice, splice_e2e, write_json

DUE_AT = 1_000.0
DUE = {"job-0000000", "job-0000001", "job-0000002"}


def test_ledger_lines_read_back_and_torn_ones_are_counted_bad() -> None:
    lines = [ledger_line("job-0000000", 1001.5), "", "job-0000001\t10", "job-00", "\t1002.0"]

    deliveries, bad = parse_ledger(lines)

    assert deliveries == [("job-0000000", 1001.5), ("job-0000001", 10.0)]
    assert bad == 2


def test_every_due_firing_once_has_no_duplicate_or_miss() -> None:
    counted = count_at_target(
        [("job-0000002", 1003.0), ("job-0000000", 1001.0), ("job-0000001", 1002.5)],
        DUE, DUE_AT,
    )  # fmt: skip

    assert (counted.duplicates, counted.misses, counted.unexpected) == (0, 0, 0)
    assert counted.lateness_s == [1.0, 2.5, 3.0]


def test_a_second_request_is_a_duplicate_and_lateness_keeps_the_first() -> None:
    counted = count_at_target(
        [("job-0000000", 1004.0), ("job-0000000", 1001.0), ("job-0000001", 1002.0),
         ("job-0000002", 1002.0), ("job-0000000", 1005.0)],
        DUE, DUE_AT,
    )  # fmt: skip

    assert counted.duplicates == 2
    assert counted.misses == 0
    assert counted.lateness_s == [1.0, 2.0, 2.0]


def test_a_firing_never_seen_is_a_miss_and_others_are_unexpected() -> None:
    counted = count_at_target(
        [("job-0000000", 1001.0), ("job-0000009", 1001.0), ("job-0000009", 1002.0)],
        DUE, DUE_AT, bad=1,
    )  # fmt: skip

    assert counted.misses == 2
    assert counted.duplicates == 0
    # Requests for jobs that were not due, and the unreadable line.
    assert counted.unexpected == 3
    assert counted.lateness_s == [1.0]


def test_the_target_reads_the_firing_from_the_body() -> None:
    assert firing_of(json.dumps({"firing": "job-0000042"}).encode()) == "job-0000042"
    assert firing_of(b"not json") == ""
    assert firing_of(b"[1, 2]") == ""
    assert firing_of(b"{}") == ""


def _section(tmp_path: Path) -> Path:
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n## Beat engine\n\nkeep me\n")
    splice(path, f"{TITLE}\n\n### spike: 10 due\n\nspike table\n\n### Plots\n\nplots\n")
    return path


def test_e2e_subsection_goes_before_the_plots_and_replaces_only_itself(tmp_path: Path) -> None:
    path = _section(tmp_path)

    assert splice_e2e(path, ["### e2e: first"])
    assert splice_e2e(path, ["### e2e: second"])

    text = path.read_text()
    assert "first" not in text
    assert text.count(E2E_START) == 1
    assert text.index("spike table") < text.index("### e2e: second") < text.index("### Plots")
    assert text.index(E2E_END) < text.index(END)
    assert "keep me" in text


def test_e2e_subsection_needs_our_section(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\n## Beat engine\n\nkeep me\n")

    assert not splice_e2e(path, ["### e2e"])
    assert path.read_text() == "# Benchmarks\n\n## Beat engine\n\nkeep me\n"


def test_e2e_records_replace_only_e2e_records(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    old = [
        {"source": "bench-compare", "scenario": "spike", "metric": "last_publish"},
        {"source": "bench-compare", "scenario": "e2e", "metric": "last_executed"},
        {"source": "bench-history", "scenario": "e2e", "metric": "x"},
    ]
    path.write_text(json.dumps({"records": old}))

    write_json(path, [], {"e2e"})

    assert json.loads(path.read_text())["records"] == [old[0], old[2]]
