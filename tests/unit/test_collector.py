"""The garbage-collector policy: survivors frozen every period, a full pass on its schedule."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from app.core import collector


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settle_freezes_survivors_and_collects_young_cycles() -> None:
    keep = [Cycle() for _ in range(100)]
    Cycle()  # garbage at once: a young cycle
    collector.settle()
    assert gc.get_freeze_count() > 0
    assert all(gc.is_tracked(c) for c in keep)
    # Nothing young is left for the collector to walk.
    assert gc.get_count()[0] < 50


def test_a_full_pass_reclaims_cycles_that_died_frozen() -> None:
    cycles = [Cycle() for _ in range(10)]
    collector.settle()
    del cycles
    assert gc.collect() == 0  # frozen: the ordinary collector does not see them
    gc.freeze()
    collector.full_pass()
    assert gc.get_freeze_count() == 0
    gc.freeze()
    gc.unfreeze()
    assert gc.collect() == 0  # the full pass already reclaimed them


async def test_the_loop_settles_every_period_and_runs_the_full_pass_on_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(collector, "settle", lambda: calls.append("settle"))
    monkeypatch.setattr(collector, "full_pass", lambda: calls.append("full"))
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # every reading one "second" later
        return now[0]

    periods: list[float] = []

    async def sleep(seconds: float) -> None:  # a period passes at once, on the fake clock
        periods.append(seconds)
        await asyncio.sleep(0)

    task = asyncio.create_task(collector.keep_collections_young(5.0, 3.0, clock, sleep))
    for _ in range(1000):
        if len(calls) >= 8:
            break
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The clock moves one "second" per reading: the full pass falls due at every third tick,
    # and is followed by its own settle.
    assert calls[:8] == ["settle", "settle", "full", "settle", "settle", "settle", "full", "settle"]
    assert set(periods) == {5.0}
