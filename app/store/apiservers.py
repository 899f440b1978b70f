"""The live API servers, counted so each takes its part of every priority level's seats
(ADR 0049). Called by :mod:`app.api.fairness`'s heartbeat loop, one query per beat."""

from __future__ import annotations

import asyncpg

_BEAT = """
WITH beat AS (
    INSERT INTO qm_api_servers (id) VALUES ($1)
    ON CONFLICT (id) DO UPDATE SET renewed_at = now()
)
SELECT count(*) FROM qm_api_servers
WHERE id <> $1 AND renewed_at > now() - make_interval(secs => $2)
"""


async def heartbeat(pool: asyncpg.Pool, server_id: str, lease_s: float) -> int:
    """Renew this server's row; returns how many servers are live, this one included (rows
    renewed within ``lease_s``). Rows of servers gone for ten leases are deleted."""
    async with pool.acquire() as conn:
        others = await conn.fetchval(_BEAT, server_id, lease_s)
        await conn.execute(
            "DELETE FROM qm_api_servers WHERE renewed_at < now() - make_interval(secs => $1)",
            lease_s * 10,
        )
    return int(others) + 1


async def leave(pool: asyncpg.Pool, server_id: str) -> None:
    """This server stops serving: the others take its part at their next beat."""
    await pool.execute("DELETE FROM qm_api_servers WHERE id = $1", server_id)
