"""What a worker process needs to run reconciles: one event loop and one database pool per
process, the per-key lock, and the pending markers that deduplicate enqueued keys.

* **At most one reconcile per key at a time.** A reconcile holds a PostgreSQL advisory lock on
  its key for its whole read-decide-write; a second worker that picks up the same key finds it
  taken and retries shortly, so it runs after the first with fresh state.
* **A crash never overshoots.** While a reconcile creates children, every statement it runs
  for them is a transaction that first takes the key's *apply lock* (a shared advisory lock,
  transaction-level; ``creating_store``). A worker killed mid-create leaves its statement
  running in the database, holding that lock, until it commits or rolls back; the next
  reconcile of the key takes the apply lock exclusively once (``locked``) before it reads, so
  it counts what the dead one made.
* **Through PgBouncer** (transaction pooling, ADR 0057) no session state survives a
  transaction, so both locks are transactions': the key lock is held by a transaction left
  open for the block (PgBouncer keeps its server connection), the apply lock by each create's
  own. The same code runs on a direct connection.
* **A burst of changes is one reconcile.** Enqueuing a key first sets a Redis marker
  (``SET NX``); while the marker exists, further changes to the key enqueue nothing. The
  reconcile clears the marker *before* it reads state, so a change made while it runs
  enqueues the key again and nothing is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar, cast

import asyncpg
import redis

from app.core.errors import TemporaryError
from app.store.db import create_pool, database_url
from app.store.store import Store

T = TypeVar("T")
PENDING_PREFIX = "qm:pending:"
# A marker whose task was lost (its worker died holding it) blocks the key's enqueues for at
# most this long; after that the next change or resync enqueues the key again.
PENDING_TTL = int(os.environ.get("QM_PENDING_TTL", "30"))


BUSY_RETRY_SECONDS = 0.2


class Busy(TemporaryError):
    """Another worker is reconciling this key right now: try again shortly, after it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key} is being reconciled elsewhere", BUSY_RETRY_SECONDS)


def key_text(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


# The key whose children the running coroutine creates; set by ``creating``.
_CREATING: contextvars.ContextVar[str | None] = contextvars.ContextVar("creating", default=None)
_LOCKED: contextvars.ContextVar[str | None] = contextvars.ContextVar("locked", default=None)
# The apply lock is the key's text hashed with another seed than the key lock's.
_APPLY_LOCK = "hashtextextended($1, 8)"


@contextlib.contextmanager
def creating() -> Iterator[None]:
    """The block creates the locked key's children: ``creating_store`` gives the store whose
    statements hold the key's apply lock (see the module); outside a ``Runtime.locked`` block
    this does nothing."""
    token = _CREATING.set(_LOCKED.get())
    try:
        yield
    finally:
        _CREATING.reset(token)


async def creating_store(store: Store) -> Store:
    """``store`` for the creates of a ``creating`` block: every use of its pool is a
    transaction holding the key's apply lock (itself outside such a block)."""
    key = _CREATING.get()
    if key is None:
        return store
    return Store(cast(asyncpg.Pool, ApplyLocked(store.pool, key)), store.rng)


class ApplyLocked:
    """The pool as a reconcile's creates see it: each acquire is a transaction that first
    takes the key's apply lock, shared and transaction-level, so it is held exactly while the
    statements run and until they commit or roll back, also through PgBouncer."""

    def __init__(self, pool: asyncpg.Pool, key: str) -> None:
        self._pool = pool
        self._key = key

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SELECT pg_advisory_xact_lock_shared({_APPLY_LOCK})", self._key)
            yield conn

    async def fetch(self, query: str, *args: Any, **kw: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetch(query, *args, **kw)

    async def fetchrow(self, query: str, *args: Any, **kw: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchrow(query, *args, **kw)

    async def fetchval(self, query: str, *args: Any, **kw: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(query, *args, **kw)

    async def execute(self, query: str, *args: Any, **kw: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.execute(query, *args, **kw)


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
        """Hold the key's advisory lock for the block, or raise ``Busy``. Before the block
        runs, statements a dead reconcile of the key left creating in the database are waited
        for (the apply lock, taken once exclusively)."""
        async with self.locked_many([key]) as held:
            if not held:
                raise Busy(key)
            pool = await self.pool()
            # Taken and released by one statement: it waits for the creates still holding it.
            await pool.execute(f"SELECT pg_advisory_xact_lock({_APPLY_LOCK})", key)
            token = _LOCKED.set(key)
            try:
                yield
            finally:
                _LOCKED.reset(token)

    @contextlib.asynccontextmanager
    async def locked_many(self, keys: list[str]) -> AsyncIterator[set[str]]:
        """Hold the advisory locks of whichever ``keys`` are free, on one connection, for the
        block; yields those keys (a key another reconcile holds is left to it)."""
        pool = await self.pool()
        # Transaction-level locks in a transaction held open for the block: through PgBouncer
        # the transaction keeps one server connection, and its end (commit, or the client's
        # death) releases them.
        async with pool.acquire() as conn:
            try:
                async with conn.transaction():
                    got: list[str] = await conn.fetchval(
                        "SELECT coalesce(array_agg(k), '{}') FROM unnest($1::text[]) k"
                        " WHERE pg_try_advisory_xact_lock(hashtextextended(k, 7))",
                        list(dict.fromkeys(keys)),
                    )
                    yield set(got)
            except BaseException:
                if conn.is_in_transaction():
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
