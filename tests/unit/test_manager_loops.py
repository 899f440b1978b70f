"""The controller manager driving its singleton loops, on a fake clock: a loop ticks once per
interval only while the lease is held, is reset on every change of term (even a loss and a
regain between two ticks), survives a failing tick, and a slow tick is reported."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workers.loops import Context
from workers.manager import Manager

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class FakeClock:
    """Monotonic time that moves only when the test says; the manager's waits park on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits = 0  # how many waits have begun, ever
        self._parked: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return T0 + timedelta(seconds=self.now)

    async def wait(self, stop: asyncio.Event, seconds: float) -> None:
        due = asyncio.get_running_loop().create_future()
        self._parked.append((self.now + seconds, due))
        self.waits += 1
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((due, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            self._parked = [(t, f) for t, f in self._parked if f is not due]

    async def parked(self, count: int) -> None:
        """Until ``count`` waits have begun in all: every woken loop has come back to wait."""
        for _ in range(1000):
            if self.waits >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"{self.waits} of {count} waits begun")

    async def advance(self, seconds: float) -> None:
        """Move time on, waking each wait as its moment comes, in order."""
        target = self.now + seconds
        while True:
            due = [t for t, f in self._parked if t <= target and not f.done()]
            if not due:
                break
            self.now = max(self.now, min(due))
            woken = [f for t, f in self._parked if t <= self.now and not f.done()]
            for f in woken:
                f.set_result(None)
            await self.parked(self.waits + len(woken))
        self.now = max(self.now, target)  # a slow tick may have carried time past the target


@dataclass
class FakeLease:
    leading: bool = False
    on_change: Any = None

    async def run(self, stop: asyncio.Event, on_change: Any = None) -> None:
        self.on_change = on_change
        await stop.wait()

    def is_leader(self) -> bool:
        return self.leading

    async def release(self) -> bool:
        return True

    def flip(self, leading: bool) -> None:
        self.leading = leading
        self.on_change(leading)


@dataclass
class RecordingLoop:
    clock: FakeClock
    name: str = "recording"
    interval: float = 5.0
    takes: float = 0.0  # how long each tick runs, on the fake clock
    fail: type[BaseException] | None = None
    resets: int = 0
    ticks: list[tuple[float, int]] = field(default_factory=list)  # (when, resets so far)

    def reset(self) -> None:
        self.resets += 1

    async def tick(self, ctx: Context) -> None:
        self.ticks.append((ctx.monotonic(), self.resets))
        assert ctx.wall() == T0 + timedelta(seconds=ctx.monotonic())
        self.clock.now += self.takes
        if self.fail is not None:
            raise self.fail("tick failed")


async def start(clock: FakeClock, *loops: RecordingLoop) -> tuple[FakeLease, Any, Any]:
    lease, stop = FakeLease(), asyncio.Event()
    manager = Manager(
        None,  # type: ignore[arg-type]
        list(loops),
        lease,  # type: ignore[arg-type]
        monotonic=clock.monotonic,
        wall=clock.wall,
        wait=clock.wait,
    )
    task = asyncio.create_task(manager.run(stop))
    await clock.parked(len(loops))

    async def finish() -> None:
        stop.set()
        await task

    return lease, stop, finish


async def test_loops_tick_once_an_interval_only_while_leading() -> None:
    clock = FakeClock()
    loop = RecordingLoop(clock, interval=5.0)
    lease, _, finish = await start(clock, loop)
    await clock.advance(60)
    assert loop.ticks == [] and loop.resets == 1  # the start of the first term
    lease.flip(True)
    await clock.advance(20)
    assert [t for t, _ in loop.ticks] == [65, 70, 75, 80]
    lease.flip(False)
    await clock.advance(30)
    assert len(loop.ticks) == 4
    await finish()


async def test_a_loss_and_regain_between_two_ticks_is_a_new_term() -> None:
    clock = FakeClock()
    loop = RecordingLoop(clock, interval=5.0)
    lease, _, finish = await start(clock, loop)
    lease.flip(True)
    await clock.advance(10)
    assert loop.ticks and {r for _, r in loop.ticks} == {2}
    lease.flip(False)
    lease.flip(True)  # leading at every look, but the loop must forget the earlier term
    await clock.advance(5)
    assert loop.resets == 3 and loop.ticks[-1][1] == 3
    await finish()


async def test_each_loop_keeps_its_own_interval() -> None:
    clock = FakeClock()
    fast = RecordingLoop(clock, name="fast", interval=1.0)
    slow = RecordingLoop(clock, name="slow", interval=4.0)
    lease, _, finish = await start(clock, fast, slow)
    lease.flip(True)
    await clock.advance(8)
    assert [t for t, _ in fast.ticks] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [t for t, _ in slow.ticks] == [4, 8]
    await finish()


@pytest.mark.parametrize("error", [OSError, RuntimeError])
async def test_a_failing_tick_is_retried_at_the_next_interval(
    error: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    loop = RecordingLoop(clock, interval=5.0, fail=error)
    lease, _, finish = await start(clock, loop)
    lease.flip(True)
    await clock.advance(15)
    assert [t for t, _ in loop.ticks] == [5, 10, 15]
    assert "loop recording" in caplog.text and "retrying" in caplog.text
    await finish()


async def test_a_tick_longer_than_the_interval_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="workers.manager")
    clock = FakeClock()
    loop = RecordingLoop(clock, interval=2.0, takes=3.0)
    lease, _, finish = await start(clock, loop)
    lease.flip(True)
    await clock.advance(2)
    assert "loop recording took 3.00s (interval 2.00s)" in caplog.text
    await finish()


async def test_the_stop_ends_every_wait_at_once() -> None:
    clock = FakeClock()
    loop = RecordingLoop(clock, interval=3600.0)
    _, _, finish = await start(clock, loop)
    await asyncio.wait_for(finish(), timeout=30)  # no fake time passes: the stop alone ends it
    assert clock.now == 0.0
