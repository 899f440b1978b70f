"""The local agents' bootstrap tokens: ``make up`` joins its agents as any cluster would.

Before the agents start, each one without a saved credential gets a one-time bootstrap token
bound to its node name (an hour to use it), written to ``<its state dir>/bootstrap-token``
(mode 0600), which the agent reads with ``--bootstrap-token-file``, so no secret is on a
command line. An agent that joined in an earlier run reuses its saved credential
(``agent.credentials``) and gets no new token. The database is written directly, as for the
migrations: the API may not be serving yet when the tokens are made.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg

from agent.credentials import FILE as CREDENTIAL_FILE
from app.store.bootstrap import create_bootstrap_token

TOKEN_FILE = "bootstrap-token"
TTL_S = 3600


def write_bootstrap_tokens(database_url: str, agents: dict[str, Path]) -> list[str]:
    """A token file in each state dir of ``agents`` (node name -> state dir) that has no
    credential yet; the nodes given one."""
    return asyncio.run(_write(database_url, agents))


async def _write(database_url: str, agents: dict[str, Path]) -> list[str]:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    try:
        made = []
        for node, state_dir in agents.items():
            if (state_dir / CREDENTIAL_FILE).exists():
                continue
            token = await create_bootstrap_token(
                pool, TTL_S, node_name=node, description="make up", created_by="make up"
            )
            state_dir.mkdir(parents=True, exist_ok=True)
            path = state_dir / TOKEN_FILE
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token.token + "\n")
            made.append(node)
        return made
    finally:
        await pool.close()
