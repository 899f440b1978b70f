"""The unit tier never sleeps on the wall clock: the guard ``conftest.py`` puts on every test.

``time.sleep`` and ``asyncio.sleep`` with a positive delay fail the test, whether the test or
the code it drives calls them: drive the code on a fake clock (inject its clock and its wait)
or wait for an observable condition. ``asyncio.sleep(0)``, which only yields to other tasks,
stays allowed, and so do waits on an event or a future with a generous deadline (they end as
soon as the condition holds). ``test_wall_clock_guard.py`` also scans the test files for reads
of the clock, which a patch cannot catch (``from time import sleep`` binds before it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

# Files that may still sleep, each with why (none: a test on real sockets and timers belongs
# in tests/integration, as the hollow nodes' HTTP pool's does).
ALLOWED: dict[str, str] = {}


class WallClockSleep(AssertionError):
    """A unit test, or the code it drives, slept on the wall clock."""


def forbid_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    real_async_sleep = asyncio.sleep

    def sleep(seconds: float) -> None:
        raise WallClockSleep(f"time.sleep({seconds!r}) in the unit tier")

    async def async_sleep(delay: float, result: Any = None) -> Any:
        if delay > 0:
            raise WallClockSleep(f"asyncio.sleep({delay!r}) in the unit tier")
        return await real_async_sleep(0, result)

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(asyncio, "sleep", async_sleep)
