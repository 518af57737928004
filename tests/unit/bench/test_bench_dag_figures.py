"""bench_dag's figures: percentiles of the hops and the rows its docs section shows."""

from __future__ import annotations

import pytest

from bench.bench_dag import _pct, figures

RESULT = {
    "fanout": {"children": 10_000, "reps": 3, "first_s": [0.2, 0.3, 0.25],
               "median_s": [0.5, 0.6, 0.55], "all_s": [1.2, 1.9, 1.4], "graph_root_s": 0.05,
               "drawing_root_s": 0.2, "drawing_child_s": 0.01},
    "chain": {"length": 3, "reps": 2, "hops_s": [0.01, 0.02, 0.03, 0.2],
              "end_to_end_s": [1.0, 3.0]},
    "overhead": {"rows": 50_000, "reps": 1, "insert_on": [1.1], "insert_off": [1.0],
                 "finish_on": [2.0], "finish_off": [2.0]},
}  # fmt: skip


def test_percentiles_interpolate_between_the_hops() -> None:
    hops = [float(i) for i in range(1, 101)]
    assert _pct(hops, 50) == pytest.approx(50.5)
    assert _pct(hops, 99) == pytest.approx(99.01)
    assert _pct([0.7], 99) == 0.7


def test_figures_show_medians_ranges_and_the_overhead_ratio() -> None:
    rows = figures(RESULT)
    fan = rows["fan-out: all children published after the parent's success (s), median (min-max)"]
    assert fan == "1.400 (1.200-1.900)"
    assert rows["chain: jobs / repetitions / hops measured"] == "3 / 2 / 4"
    assert rows["chain: root triggered -> last job succeeded (s), median"] == "2.00"
    overhead = [value for key, value in rows.items() if "claim insert" in key]
    assert overhead == ["1.100 / 1.000 (1.10x, +2.0 µs per run)"]
