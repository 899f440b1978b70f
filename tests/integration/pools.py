"""An asyncpg pool for a test module's own database, closed when the block ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from app.store.db import create_pool


@contextlib.asynccontextmanager
async def pool_on(url: str, max_size: int) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(url, min_size=1, max_size=max_size)
    try:
        yield pool
    finally:
        await pool.close()
