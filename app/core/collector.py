"""Garbage-collector policy for processes that keep hundreds of thousands of objects alive.

CPython's full collection walks every tracked object. An API server's watch cache holds every
object of the cluster and a window of recent events, so under 10,000 hollow nodes (1,000
writes/s) its full collections took 50 to 760 ms each, found nothing to collect, and came every
few seconds to minutes. Every request in flight waited that long; with this policy the
benchmark's renewals more than a second late went from up to 6.5 % of a window to none. The
load generator of that benchmark had the same problem (pauses up to 260 ms).

The policy: every ``period`` seconds (5 by default) the young generations are collected and
everything still alive is moved to the permanent generation (``gc.freeze``, a constant-time
list splice). The collector then only ever walks objects younger than ``period``. Frozen
objects are still freed by reference counting the moment they are dropped, which is how cache
entries die. Only a reference cycle that became garbage after being frozen waits for the full
pass every ``full_every`` seconds (``gc.unfreeze()`` then ``gc.collect()``). That pass is the
one long pause left, once an hour by default.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable


def settle() -> None:
    """Collect the young generations, then freeze every surviving object."""
    gc.collect(1)
    gc.freeze()


def full_pass() -> None:
    """Unfreeze everything and run one full collection (reclaims frozen cycles)."""
    gc.unfreeze()
    gc.collect()


async def keep_collections_young(
    period: float = 5.0,
    full_every: float = 3600.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run :func:`settle` every ``period`` seconds and :func:`full_pass` (then settle) every
    ``full_every`` seconds, until cancelled."""
    last_full = clock()
    while True:
        await sleep(period)
        if clock() - last_full >= full_every:
            full_pass()
            last_full = clock()
        settle()
