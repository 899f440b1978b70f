"""Group commit: conditional single-object writes that arrive together go as one statement.

Every node agent renews its Lease every 10 s and writes its pods' status, so an API server
under 10,000 nodes takes about a thousand small audited writes a second. Sent one by one, each
is a statement, a commit (a WAL flush), and a transaction the revisioner decodes and logs on
its own. A :class:`Lane` keeps at most ``flights`` statements of one shape in flight; writes
that arrive meanwhile wait and go together in the next statement (``UPDATE ... FROM unnest``),
each still conditional on its own row version and with its own audit row. At low load nothing
waits: a write that finds a flight free goes at once, alone, through the one-object statement.

Rules that keep a batch equivalent to its writes done one by one:

* **One write per object per statement.** A write whose object is already in the batch, or in
  another flight, waits for the next statement, so it is judged against the committed result
  of the one before it (its row version will have moved, and it gets Conflict, exactly as when
  serialised).
* **One write's failure is its own.** If a batched statement fails as a whole (a value only
  one of the writes carries, a deadlock with another server's batch), each of its writes is run
  again alone and gets its own answer.
* Objects in a batch are sent in ``(namespace, name)`` order, so two servers' batches lock
  common rows in the same order.

The lane is pure asyncio over two injected coroutines (``one`` and ``many``), so its batching
is tested without a database; :mod:`app.store.store` supplies the SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

A = TypeVar("A")  # one write's arguments
R = TypeVar("R")  # one write's result (None: its condition did not hold)

One = Callable[[A], Awaitable[R | None]]
Many = Callable[[Sequence[A]], Awaitable[list[R | None]]]


@dataclass(slots=True)
class _Write(Generic[A, R]):
    key: Hashable
    args: A
    future: asyncio.Future[R | None]


@dataclass
class LaneStats:
    """Counters the tests read: statements sent, writes in them, the largest batch, and
    batches the database refused (run again write by write)."""

    statements: int = 0
    writes: int = 0
    largest: int = 0
    fallbacks: int = 0


@dataclass
class Lane(Generic[A, R]):
    """Writes of one shape (say, audited spec updates of Leases), coalesced while in flight."""

    one: One[A, R]
    many: Many[A, R]
    flights: int = 2
    max_batch: int = 256
    stats: LaneStats = field(default_factory=LaneStats)
    _waiting: deque[_Write[A, R]] = field(default_factory=deque)
    _flying: set[Hashable] = field(default_factory=set)
    _running: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def write(self, key: Hashable, args: A) -> R | None:
        """Run one write (``key`` names its object); its result, or None if its condition
        failed. Exceptions raised for this write alone are raised here."""
        future: asyncio.Future[R | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Write(key, args, future))
        if self._running < self.flights:
            self._running += 1
            task = asyncio.create_task(self._fly())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    def _board(self) -> list[_Write[A, R]]:
        """Take the next batch: the oldest waiting writes, one per object, none of whose
        objects is already in flight; the rest keep their place in the queue."""
        batch: list[_Write[A, R]] = []
        keys: set[Hashable] = set()
        left: deque[_Write[A, R]] = deque()
        while self._waiting:
            w = self._waiting.popleft()
            if w.future.cancelled():
                continue
            if len(batch) >= self.max_batch or w.key in keys or w.key in self._flying:
                left.append(w)
                continue
            batch.append(w)
            keys.add(w.key)
        self._waiting = left
        self._flying |= keys
        return batch

    async def _fly(self) -> None:
        try:
            while batch := self._board():
                try:
                    await self._send(batch)
                finally:
                    self._flying -= {w.key for w in batch}
        finally:
            # Nothing is stranded: a write left waiting here names an object another flight
            # is writing, and that flight boards it when it comes back for its next batch.
            self._running -= 1

    async def _send(self, batch: list[_Write[A, R]]) -> None:
        self.stats.statements += 1
        self.stats.writes += len(batch)
        self.stats.largest = max(self.stats.largest, len(batch))
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        try:
            results = await self.many([w.args for w in batch])
        except Exception:
            self.stats.fallbacks += 1
            for w in batch:
                await self._alone(w)
            return
        for w, result in zip(batch, results, strict=True):
            _settle(w.future, result)

    async def _alone(self, w: _Write[A, R]) -> None:
        try:
            result = await self.one(w.args)
        except Exception as exc:
            if not w.future.done():
                w.future.set_exception(exc)
            return
        _settle(w.future, result)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)
