"""observe_many: the same histogram as observe() per value, whatever the values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from jobs.metrics import LAG_BUCKETS, observe_many


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


@given(st.lists(st.floats(min_value=-5, max_value=2000, allow_nan=False), max_size=200))
def test_observe_many_matches_observe_one_by_one(values: list[float]) -> None:
    one, many = CollectorRegistry(), CollectorRegistry()
    by_one = Histogram("lag_seconds", "x", ["queue"], buckets=LAG_BUCKETS, registry=one)
    by_many = Histogram("lag_seconds", "x", ["queue"], buckets=LAG_BUCKETS, registry=many)
    child = by_one.labels(queue="q")
    for value in values:
        child.observe(value)
    observe_many(by_many.labels(queue="q"), values)
    expected, got = _samples(one), _samples(many)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert abs(got[key] - value) <= 1e-6 * max(1.0, abs(value)), key


def test_a_value_on_a_bucket_bound_counts_in_that_bucket() -> None:
    registry = CollectorRegistry()
    histogram = Histogram("h_seconds", "x", buckets=(1.0, 2.0), registry=registry)
    observe_many(histogram, [1.0, 2.0, 2.5])
    samples = _samples(registry)
    assert samples[("h_seconds_bucket", "1.0")] == 1
    assert samples[("h_seconds_bucket", "2.0")] == 2
    assert samples[("h_seconds_bucket", "+Inf")] == 3
    assert samples[("h_seconds_sum", "")] == 5.5
