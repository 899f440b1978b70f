"""Bearer tokens, stored only as SHA-256 digests.

The bootstrap admin token is inserted at API start from ``QM_BOOTSTRAP_TOKEN``; more tokens can
be added with ``create_token`` (the plain token is shown once and never stored).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def ensure_token(
    pool: asyncpg.Pool,
    token: str,
    username: str = "admin",
    groups: tuple[str, ...] = ("system:masters",),
    description: str = "bootstrap",
) -> None:
    await pool.execute(
        "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
        " VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (token_sha256) DO NOTHING",
        username,
        list(groups),
        digest(token),
        description,
    )


async def create_token(
    pool: asyncpg.Pool, username: str, groups: tuple[str, ...] = (), description: str = ""
) -> str:
    token = secrets.token_urlsafe(32)
    await ensure_token(pool, token, username, groups, description)
    return token


async def authenticate(pool: asyncpg.Pool, token: str) -> User | None:
    rec = await pool.fetchrow(
        "SELECT username, groups FROM qm_tokens WHERE token_sha256 = $1"
        " AND (expires_at IS NULL OR expires_at > now())",
        digest(token),
    )
    return None if rec is None else User(rec["username"], tuple(rec["groups"]))
