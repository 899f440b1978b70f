"""What a worker process needs to run reconciles: one event loop and one database pool per
process, the per-key lock, and the pending markers that deduplicate enqueued keys.

* **At most one reconcile per key at a time.** A reconcile holds a PostgreSQL advisory lock on
  its key for its whole read-decide-write; a second worker that picks up the same key finds it
  taken and retries shortly, so it runs after the first with fresh state.
* **A burst of changes is one reconcile.** Enqueuing a key first sets a Redis marker
  (``SET NX``); while the marker exists, further changes to the key enqueue nothing. The
  reconcile clears the marker *before* it reads state, so a change made while it runs
  enqueues the key again and nothing is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import asyncpg
import redis

from app.store.db import create_pool, database_url
from app.store.store import Store

T = TypeVar("T")
PENDING_PREFIX = "qm:pending:"
# A marker whose task was lost (its worker died holding it) blocks the key's enqueues for at
# most this long; after that the next change or resync enqueues the key again.
PENDING_TTL = int(os.environ.get("QM_PENDING_TTL", "30"))


class Busy(Exception):
    """Another worker is reconciling this key right now."""


def key_text(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


class Runtime:
    """Per worker process; created lazily on first use (after Celery forks its children)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._pool: asyncpg.Pool | None = None
        self._redis: redis.Redis | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            # Reconciles leave no session state behind (the key lock is released by ``locked``
            # itself), so connections skip the reset query: a round trip saved per use.
            self._pool = await create_pool(
                database_url(), min_size=1, max_size=4, reset_sessions=False
            )
        return self._pool

    async def store(self) -> Store:
        return Store(await self.pool())

    @property
    def redis(self) -> redis.Redis:
        if self._redis is None:
            url = os.environ.get("QM_BROKER_URL", "redis://127.0.0.1:6379/0")
            self._redis = redis.Redis.from_url(url)
        return self._redis

    @contextlib.asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[None]:
        """Hold the key's advisory lock for the block, or raise ``Busy``."""
        async with self.locked_many([key]) as held:
            if not held:
                raise Busy(key)
            yield

    @contextlib.asynccontextmanager
    async def locked_many(self, keys: list[str]) -> AsyncIterator[set[str]]:
        """Hold the advisory locks of whichever ``keys`` are free, on one connection, for the
        block; yields those keys (a key another reconcile holds is left to it)."""
        pool = await self.pool()
        async with pool.acquire() as conn:
            got: list[str] = await conn.fetchval(
                "SELECT coalesce(array_agg(k), '{}') FROM unnest($1::text[]) k"
                " WHERE pg_try_advisory_lock(hashtextextended(k, 7))",
                list(dict.fromkeys(keys)),
            )
            try:
                yield set(got)
            finally:
                try:
                    if got:
                        await conn.execute(
                            "SELECT pg_advisory_unlock(hashtextextended(k, 7))"
                            " FROM unnest($1::text[]) k",
                            got,
                        )
                except BaseException:
                    conn.terminate()  # the locks end with the session, never left held
                    raise

    # -- pending markers -----------------------------------------------------------------
    def mark_pending(self, key: str) -> bool:
        """True when the key was not pending yet (the caller should enqueue it)."""
        return bool(self.redis.set(PENDING_PREFIX + key, b"1", nx=True, ex=PENDING_TTL))

    def clear_pending(self, key: str) -> None:
        self.redis.delete(PENDING_PREFIX + key)


_runtime: Runtime | None = None


def runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        _runtime = Runtime()
    return _runtime
