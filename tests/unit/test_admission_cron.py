from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.admission.cron import parse_schedule, schedule_error


@pytest.mark.parametrize(
    "text",
    ["* * * * *", "0 3 * * *", "*/15 * * * *", "0 9-17 * * MON-FRI", "0 0 1,15 * *",
     "30 2 * JAN,JUL sun", "0 0 * * 7", "0-59/10 * * * *", "5/10 * * * *", "0 0 ? * *",
     "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight",
     "  0 3 * * *  ", "0 0 29 2 *"],
)  # fmt: skip
def test_valid_schedules(text: str) -> None:
    assert schedule_error(text) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "5 fields"),
        ("* * * *", "5 fields"),
        ("* * * * * *", "5 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * 32 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day of week"),
        ("* * * FOO *", "month"),
        ("* * * * FUNDAY", "day of week"),
        ("*/0 * * * *", "step"),
        ("*/x * * * *", "step"),
        ("5-1 * * * *", "starts after"),
        ("1,,2 * * * *", "empty"),
        ("? * * * *", "minute"),
        ("@every 5m", "macro"),
        ("@sometimes", "macro"),
        ("TZ=UTC * * * * *", "TZ"),
        ("x" * 2000, "too long"),
        ("-1 * * * *", "minute"),
        ("1-2-3 * * * *", "minute"),
        ("٣ * * * *", "minute"),
    ],
)
def test_invalid_schedules(text: str, fragment: str) -> None:
    error = schedule_error(text)
    assert error is not None and fragment in error


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        ("*/15 * * * *", "2024-05-01T10:07:30", "2024-05-01T10:15:00"),
        ("*/15 * * * *", "2024-05-01T10:45:00", "2024-05-01T11:00:00"),
        ("0 3 * * *", "2024-05-01T03:00:00", "2024-05-02T03:00:00"),
        ("0 9 * * MON-FRI", "2024-05-03T10:00:00", "2024-05-06T09:00:00"),  # Fri -> Mon
        ("0 0 1 * *", "2024-12-15T00:00:00", "2025-01-01T00:00:00"),
        ("@yearly", "2024-06-01T00:00:00", "2025-01-01T00:00:00"),
        ("0 0 29 2 *", "2024-03-01T00:00:00", "2028-02-29T00:00:00"),
        ("0 0 * * 0", "2024-05-01T00:00:00", "2024-05-05T00:00:00"),
        ("0 0 * * 7", "2024-05-01T00:00:00", "2024-05-05T00:00:00"),
        # Both day fields restricted: either may match (cron semantics).
        ("0 0 13 * FRI", "2024-05-01T00:00:00", "2024-05-03T00:00:00"),
        ("0 0 13 * FRI", "2024-05-11T00:00:00", "2024-05-13T00:00:00"),
    ],
)
def test_next_after(schedule: str, after: str, expected: str) -> None:
    assert parse_schedule(schedule).next_after(_t(after)) == _t(expected)


def test_never_firing_schedule() -> None:
    assert parse_schedule("0 0 30 2 *").next_after(_t("2024-01-01T00:00:00")) is None


def test_time_zone_aware_datetimes() -> None:
    start = datetime(2024, 5, 1, 10, 7, tzinfo=UTC)
    assert parse_schedule("0 * * * *").next_after(start) == datetime(2024, 5, 1, 11, tzinfo=UTC)


@given(
    st.sampled_from(["*/7 * * * *", "15 */3 * * *", "0 0 * * MON", "30 6 1-7 * *", "@daily"]),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)),
)
def test_next_after_is_strictly_later_and_matches(schedule: str, start: datetime) -> None:
    sched = parse_schedule(schedule)
    nxt = sched.next_after(start)
    assert nxt is not None and nxt > start and nxt.second == 0
    assert nxt.minute in sched.minutes and nxt.hour in sched.hours
    assert nxt.month in sched.months


@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes(text: str) -> None:
    schedule_error(text)
