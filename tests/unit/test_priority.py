from __future__ import annotations

import pytest

from app.core.priority import BATCH, BEST_EFFORT, PRODUCTION, PRODUCTION_THRESHOLD, band, in_band


@pytest.mark.parametrize(
    ("priority", "expected"),
    [(None, BATCH), (0, BATCH), (999, BATCH), (1000, PRODUCTION), (2_000_000_000, PRODUCTION),
     (-1, BEST_EFFORT), (-(2**31), BEST_EFFORT)],
)  # fmt: skip
def test_bands(priority: int | None, expected: str) -> None:
    assert band(priority) == expected
    assert in_band(priority, expected)


def test_threshold() -> None:
    assert PRODUCTION_THRESHOLD == 1000
    assert band(PRODUCTION_THRESHOLD - 1) == BATCH
