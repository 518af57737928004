"""preview_schedule prints instants in the zone; bad input exits non-zero with a message."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command


def _preview(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("preview_schedule", *args, stdout=out)
    return out.getvalue().split()


def test_preview_spring_forward_gap_fires_at_first_valid_instant() -> None:
    lines = _preview(
        "30 2 * * *",
        "--tz",
        "Europe/Paris",
        "--after",
        "2026-03-28T00:00:00+00:00",
        "--count",
        "3",
    )
    assert lines == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0 0 30 2 *"], "never fires"),
        (["* * * * *", "--tz", "PST"], "unknown time zone"),
        (["* * *"], "schedule"),
        (["* * * * *", "--after", "yesterday"], "ISO 8601"),
        (["* * * * *", "--after", "2026-01-01T00:00:00"], "UTC offset"),
        (["* * * * *", "--count", "0"], "--count"),
    ],
)
def test_preview_rejects_bad_input(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _preview(*args)
