"""Singleton loops: work that must run in exactly one place at a time, hosted by the controller
manager (``python -m workers.manager``) while it holds the manager's leader lease.

A loop is an object with a ``name``, an ``interval`` in seconds, ``async tick(ctx)`` and
``reset()``. The manager calls ``reset()`` whenever this process gains or loses leadership, so
a loop never acts on memory from an earlier term (the node lifecycle loop, for one, must start
its silence clocks afresh), and ``tick`` only while it leads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import asyncpg

from app.store.store import Store


@dataclass
class Context:
    """What a tick may use; the clocks are injected so loops can be driven by tests."""

    pool: asyncpg.Pool
    store: Store
    monotonic: Callable[[], float]
    wall: Callable[[], datetime]


class Loop(Protocol):
    name: str
    interval: float

    async def tick(self, ctx: Context) -> None: ...

    def reset(self) -> None: ...
