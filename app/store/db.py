"""Database connection settings and pools.

Requests go through ``DATABASE_URL``. Behind PgBouncer's transaction pooling (set
``QM_PGBOUNCER=1``, ADR 0057) asyncpg's prepared-statement cache must be off, which costs an
extra round trip per query, and the reset query on release is skipped; on a direct connection
both stay on. The change stream needs a direct connection, ``QM_STREAM_DATABASE_URL``
(defaults to the same).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import asyncpg
import msgspec

_enc = msgspec.json.Encoder()

# libpq settings for the long-lived threaded connections (the revisioner's, its log writer's and
# the history sealer's): a connect that gets no answer (the address taken by something that is
# not PostgreSQL, a server half gone) fails after 10 s, and a connection whose peer vanished
# without a word is found dead by TCP keepalives within about 25 s. Without them such a call
# blocks in libpq, where neither a stop event nor a signal handler gets to run.
BOUNDED_WAITS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("DATABASE_URL is not set")
    return url


def stream_database_url() -> str:
    return os.environ.get("QM_STREAM_DATABASE_URL") or database_url()


async def _init(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(
            typ,
            schema="pg_catalog",
            encoder=lambda v: _enc.encode(v).decode(),
            decoder=msgspec.json.decode,
            format="text",
        )


def behind_pgbouncer() -> bool:
    return os.environ.get("QM_PGBOUNCER", "") not in ("", "0", "false")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """No reset query on release (open transactions are still rolled back by asyncpg)."""


async def create_pool(
    url: str,
    min_size: int = 2,
    max_size: int = 20,
    *,
    reset_sessions: bool = True,
    setup: Callable[[Any], Coroutine[Any, Any, None]] | None = None,
    reset: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
) -> asyncpg.Pool:
    """A pool of request connections (safe behind PgBouncer when ``QM_PGBOUNCER`` is set).

    By default a connection's session is reset when it returns to the pool (one more round
    trip per use). A process whose code leaves no session state behind (no ``SET``, ``LISTEN``
    or advisory lock outliving its block) passes ``reset_sessions=False``. ``setup`` runs on
    every acquire and ``reset`` (instead of the reset query) on every release."""
    pool = await asyncpg.create_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        init=_init,
        setup=setup,
        # Behind PgBouncer the reset query would run on whichever server connection is free,
        # not this session's: it is skipped (an open transaction is still rolled back).
        reset=reset or (None if reset_sessions and not behind_pgbouncer() else _keep_session),
        statement_cache_size=0 if behind_pgbouncer() else 256,
        server_settings={"application_name": "quaymaster", "TimeZone": "UTC"},
    )
    assert pool is not None
    return pool
