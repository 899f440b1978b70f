"""The change history's status and broken-link values (app.store.history), without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from app.store.history import Broken, Status

NOW = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


def test_lag_is_the_age_of_the_oldest_unsealed_row() -> None:
    st = Status(10, 0, 3, NOW - timedelta(seconds=2.5), "ab")
    assert st.lag_s(NOW) == 2.5


def test_no_lag_when_everything_is_sealed_or_the_clock_is_behind() -> None:
    assert Status(10, 0, 0, None, "ab").lag_s(NOW) == 0.0
    assert Status(10, 0, 1, NOW + timedelta(seconds=1), "ab").lag_s(NOW) == 0.0


def test_a_broken_link_names_its_row_in_utc() -> None:
    at = datetime(2026, 12, 2, 8, 0, 0, 5, tzinfo=UTC).astimezone(timezone(timedelta(hours=1)))
    text = Broken(17, 42, at, "changed").describe()
    assert text == "seq 17 (id 42, at 2026-12-02T08:00:00.000005Z): changed"


def test_a_missing_tail_has_no_row() -> None:
    assert Broken(None, None, None, "the chain ends at seq 4").describe() == (
        "the chain ends at seq 4"
    )
