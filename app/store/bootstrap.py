"""Bootstrap tokens and the node credentials they are exchanged for.

An administrator creates a bootstrap token (``qm node bootstrap-token create``); an agent
presents it once to ``POST .../nodecredentials`` (:mod:`app.api.nodeauth`) and gets a token of
its own node, user ``system:node:<name>`` in group ``system:nodes``, minted by
:func:`app.store.tokens.create_token` like every other token, so one authentication path serves
every principal. A bootstrap token is ``<id>.<secret>``: the id is public, the secret is kept
only as its SHA-256. Its uses count down in one ``UPDATE ... RETURNING``, so two agents racing
for the last use cannot both win.

A token bound to no node (created without ``--node``) may not join under the name of a node
that already holds a live credential (:class:`NodeHeld`): that would hand the new machine the
pods and Secrets of the node running under that name. Re-joining such a machine takes a token
bound to its name, or revoking its credential first (deleting its Node revokes it too,
migration 0010); a join revokes the credentials the node held before, in its own transaction,
so a reimaged machine's old disk opens nothing. The check, the spend and the mint are one
transaction under a lock on the node's name, so two joins racing for one name cannot both pass
the check. Called by the API server only.
"""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass

import asyncpg

from app.core.audit import system
from app.store.tokens import Conn, create_token, digest, revoke, token_id

NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
APISERVER_USER = "system:apiserver"
APISERVERS_GROUP = "system:apiservers"
_FORMAT = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class BootstrapToken:
    token_id: str
    token: str  # the whole token, shown once
    expires_at: str
    uses: int
    node_name: str | None


def node_user(node: str) -> str:
    return NODE_PREFIX + node


def _random(n: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


async def create_bootstrap_token(
    pool: asyncpg.Pool,
    ttl_s: float,
    *,
    uses: int = 1,
    node_name: str | None = None,
    description: str = "",
    created_by: str = "",
) -> BootstrapToken:
    """A new bootstrap token valid ``ttl_s`` seconds for ``uses`` joins (of ``node_name``
    only, when given)."""
    token_id, secret = _random(6), _random(16)
    expires = await pool.fetchval(
        "INSERT INTO qm_bootstrap_tokens"
        " (token_id, secret_sha256, node_name, uses_left, description, created_by, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))"
        " RETURNING to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
        token_id,
        digest(secret),
        node_name,
        uses,
        description,
        created_by,
        float(ttl_s),
    )
    return BootstrapToken(token_id, f"{token_id}.{secret}", str(expires), uses, node_name)


async def list_bootstrap_tokens(pool: asyncpg.Pool) -> list[dict[str, object]]:
    """Every bootstrap token still kept (spent and expired ones for an hour), newest first,
    without its secret."""
    rows = await pool.fetch(
        "SELECT token_id, node_name, uses_left, description, created_by,"
        " created_at, expires_at, last_used_at, expires_at < now() AS expired"
        " FROM qm_bootstrap_tokens ORDER BY created_at DESC, token_id"
    )
    return [dict(r) for r in rows]


async def delete_bootstrap_token(pool: asyncpg.Pool, token_id: str) -> bool:
    """Remove a bootstrap token so no agent can join with it; whether it existed."""
    gone = await pool.fetchval(
        "DELETE FROM qm_bootstrap_tokens WHERE token_id = $1 RETURNING token_id", token_id
    )
    return gone is not None


class NodeHeld(Exception):
    """A join refused: ``node`` holds a live credential and the bootstrap token is not bound
    to it. Nothing was spent."""

    def __init__(self, node: str, token_id: str) -> None:
        super().__init__(f"node {node} already holds a live credential")
        self.node, self.token_id = node, token_id


async def spend(conn: Conn, token: str, node_name: str) -> tuple[str, str | None] | None:
    """Use ``token`` once to join as ``node_name``: its id and the node it is bound to (None:
    any), or None if it is malformed, unknown, expired, spent or bound to another node."""
    m = _FORMAT.match(token)
    if m is None:
        return None
    found = await conn.fetchrow(
        "UPDATE qm_bootstrap_tokens SET uses_left = uses_left - 1, last_used_at = now()"
        " WHERE token_id = $1 AND secret_sha256 = $2 AND uses_left > 0 AND expires_at > now()"
        " AND (node_name IS NULL OR node_name = $3) RETURNING token_id, node_name",
        m[1],
        digest(m[2]),
        node_name,
    )
    return None if found is None else (str(found["token_id"]), found["node_name"])


async def live_credentials(conn: Conn, node_name: str) -> list[str]:
    """The ids of ``node_name``'s unrevoked, unexpired credentials: every token of user
    ``system:node:<name>`` in group ``system:nodes``, joined or made by hand."""
    rows = await conn.fetch(
        "SELECT name FROM qm_tokens WHERE username = $1 AND $2 = ANY(groups)"
        " AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) ORDER BY id",
        node_user(node_name),
        NODES_GROUP,
    )
    return [str(r["name"]) for r in rows]


async def join(pool: asyncpg.Pool, token: str, node_name: str) -> str | None:
    """Spend ``token`` and mint the credential of ``node_name``; None if the token is refused,
    :class:`NodeHeld` if it is bound to no node and ``node_name`` holds a live credential (the
    use is then not spent)."""
    async with pool.acquire() as conn, conn.transaction():
        # One join per name at a time: the check below cannot race another join's mint.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('qm-node-join:' || $1, 0))", node_name
        )
        spent = await spend(conn, token, node_name)
        if spent is None:
            return None
        token_id, bound_to = spent
        held = await live_credentials(conn, node_name)
        if bound_to is None and held:
            raise NodeHeld(node_name, token_id)  # rolls the spend back
        credential = await create_token(
            conn, node_user(node_name), (NODES_GROUP,), f"node {node_name} (bootstrap {token_id})"
        )
        # A re-join replaces the machine: what the one before held stops opening anything.
        replaced = system(
            node_user(node_name), reason=f"node re-joined with bootstrap token {token_id}"
        )
        for old in held:
            await revoke(conn, old, replaced)
        await conn.execute(
            "INSERT INTO qm_node_credentials (node_name, token_sha256, bootstrap_token_id)"
            " VALUES ($1, $2, $3)",
            node_name,
            digest(credential),
            token_id,
        )
    return credential


async def mint_apiserver_credential(pool: asyncpg.Pool, ttl_s: float) -> str:
    """A token this API server presents to agents' log servers (user ``system:apiserver``),
    expiring after ``ttl_s``; this server's expired ones are removed on the way."""
    token = await create_token(
        pool, APISERVER_USER, (APISERVERS_GROUP,), "api server", ttl_s=float(ttl_s)
    )
    await pool.execute(
        "DELETE FROM qm_tokens WHERE username = $1 AND expires_at < now()", APISERVER_USER
    )
    await pool.execute("SELECT qm_purge_bootstrap_tokens()")
    return token


async def retire_apiserver_credential(pool: asyncpg.Pool, token: str) -> None:
    """Revoke a credential of this server's that it no longer presents (renewed, or the
    server is stopping), so it opens no agent afterwards."""
    retired = system(APISERVER_USER, reason="api server credential retired")
    await revoke(pool, token_id(token), retired)
