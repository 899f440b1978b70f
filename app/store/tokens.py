"""Bearer tokens, stored only as SHA-256 digests, with an expiry, an owner and a revocation.

A row of ``qm_tokens`` is looked up by digest (:func:`lookup`), and it is also an object of the
internal kind ``Token`` in the revision stream (migration 0009 keeps its image in step), so a
revocation reaches every API server's authenticator through the stream (``app.api.auth``).
The plain token is returned once by :func:`mint` and never stored. The bootstrap admin token is
inserted at API start from ``QM_BOOTSTRAP_TOKEN`` (:func:`ensure_token`).

Callers: the API server (authentication, ``app.api.tokens``) and whoever mints credentials for
a principal (node credentials: :func:`create_token`).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core import errors
from app.core.audit import WriteContext, text_of
from app.core.kinds import TOKEN
from app.core.objects import COLUMNS, render
from app.core.principals import AUTHN_VERSION, actor, service_account_user
from app.store.sql import with_context

Conn = asyncpg.Pool | asyncpg.Connection | PoolConnectionProxy  # a pool, or a transaction's


@dataclass(frozen=True)
class User:
    """An authenticated principal; ``token_id`` and ``expires_at``: of the token it presented
    ('' and None when none, or when it never expires)."""

    name: str
    groups: tuple[str, ...]
    token_id: str = ""
    expires_at: datetime | None = None

    @property
    def actor(self) -> str:
        """The one-text form the audit trail records (name and groups)."""
        return actor(self.name, self.groups)


@dataclass(frozen=True)
class Credential:
    """What a valid token stands for: its principal, its record's uid and its expiry."""

    user: User
    uid: str
    expires_at: datetime | None


@dataclass(frozen=True)
class Minted:
    token: str  # shown once
    obj: dict[str, Any]  # the token's record, as the API shows it


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id(token: str) -> str:
    """A token's public id: the first 12 hex digits of its digest (its record's name)."""
    return digest(token)[:12]


_COLS = ", ".join(COLUMNS)
_INSERT = f"""
INSERT INTO qm_tokens (username, groups, token_sha256, description, expires_at, created_by,
                       sa_namespace, sa_name, sa_uid, minted_by)
SELECT $1, $2, $3, $4, now() + make_interval(secs => $5::double precision), $6, $7, $8, $9, $11
WHERE {with_context("$10")}
ON CONFLICT (token_sha256) DO NOTHING
RETURNING {_COLS}"""


async def ensure_token(
    pool: asyncpg.Pool,
    token: str,
    username: str = "admin",
    groups: tuple[str, ...] = ("system:masters",),
    description: str = "bootstrap",
) -> None:
    """Store ``token`` (never expiring) unless it is stored already: the bootstrap token."""
    await pool.execute(
        "INSERT INTO qm_tokens (username, groups, token_sha256, description)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT (token_sha256) DO NOTHING",
        username,
        list(groups),
        digest(token),
        description,
    )


async def mint(
    pool: Conn,
    username: str,
    groups: tuple[str, ...],
    ttl_s: float,
    description: str = "",
    *,
    service_account: tuple[str, str, str] | None = None,
    created_by: str = "",
    minted_by: str | None = None,
    ctx: WriteContext | None = None,
) -> Minted:
    """A new random token for ``username`` in ``groups``, valid ``ttl_s`` seconds.

    ``service_account``: ``(namespace, name, uid)`` of the account it belongs to (deleting the
    account revokes it); ``created_by``: the actor the record names ('' for none);
    ``minted_by``: the id of the token whose holder mints this one for itself (revoking that
    one revokes this one, :func:`revoke`); ``ctx``: the write context the history records."""
    token = secrets.token_urlsafe(32)
    ns, name, sa_uid = service_account or (None, None, None)
    rec = await pool.fetchrow(
        _INSERT,
        username,
        list(groups),
        digest(token),
        description,
        float(ttl_s),
        created_by,
        ns,
        name,
        uuid.UUID(sa_uid) if sa_uid else None,
        text_of(None if ctx is None else ctx.defaults(verb="create")),
        minted_by or None,
    )
    assert rec is not None, "a 256-bit random token collided with a stored one"
    return Minted(token, _obj(rec))


async def create_token(
    pool: Conn,
    username: str,
    groups: tuple[str, ...] = (),
    description: str = "",
    ttl_s: float = 365 * 24 * 3600.0,
) -> str:
    """A new token for ``username`` in ``groups`` (expiring after ``ttl_s``): for components
    that mint credentials of their own principals, such as node credentials (``pool`` may be a
    connection in a transaction, so the mint commits or rolls back with the caller's writes)."""
    return (await mint(pool, username, groups, ttl_s, description)).token


async def create_service_account_token(
    pool: asyncpg.Pool, namespace: str, name: str, ttl_s: float, description: str = "",
    created_by: str = "", ctx: WriteContext | None = None,
) -> Minted:  # fmt: skip
    """A token of the service account ``namespace/name``; NotFound if there is none."""
    sa_uid = await pool.fetchval(
        "SELECT uid::text FROM serviceaccounts WHERE namespace = $1 AND name = $2"
        " AND deletion_timestamp IS NULL",
        namespace,
        name,
    )
    if sa_uid is None:
        raise errors.NotFound(f'serviceaccounts "{name}" not found', kind="serviceaccounts")
    user, groups = service_account_user(namespace, name)
    try:
        return await mint(
            pool, user, groups, ttl_s, description,
            service_account=(namespace, name, sa_uid), created_by=created_by, ctx=ctx,
        )  # fmt: skip
    except asyncpg.ForeignKeyViolationError as exc:  # deleted meanwhile
        raise errors.NotFound(f'serviceaccounts "{name}" not found') from exc


async def lookup(pool: asyncpg.Pool, token: str) -> Credential | None:
    """The credential ``token`` stands for, if it is stored, unrevoked and unexpired."""
    rec = await pool.fetchrow(
        "SELECT uid::text, name, username, groups, expires_at FROM qm_tokens"
        " WHERE token_sha256 = $1 AND revoked_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > now())",
        digest(token),
    )
    if rec is None:
        return None
    user = User(rec["username"], tuple(rec["groups"]), rec["name"], rec["expires_at"])
    return Credential(user, rec["uid"], rec["expires_at"])


async def authenticate(pool: asyncpg.Pool, token: str) -> User | None:
    cred = await lookup(pool, token)
    return None if cred is None else cred.user


async def list_tokens(pool: asyncpg.Pool, username: str | None = None) -> list[dict[str, Any]]:
    """Every token's record (of ``username`` only, when given), oldest first."""
    where = "" if username is None else " WHERE username = $1"
    args = () if username is None else (username,)
    recs = await pool.fetch(f"SELECT {_COLS} FROM qm_tokens{where} ORDER BY id", *args)
    return [_obj(r) for r in recs]


async def get_token(pool: asyncpg.Pool, name: str) -> dict[str, Any] | None:
    rec = await pool.fetchrow(
        f"SELECT {_COLS} FROM qm_tokens WHERE namespace = '' AND name = $1", name
    )
    return None if rec is None else _obj(rec)


async def revoke(pool: Conn, name: str, ctx: WriteContext | None) -> dict[str, Any] | None:
    """Revoke the token named ``name`` (idempotent; its first revocation time is kept) under
    the write context ``ctx``, with every token minted from it for its own holder, and theirs
    (``minted_by``): a leaked token's holder cannot outlast its revocation with a token of
    their own. The record of ``name``, or None if there is no such token."""
    recs = await pool.fetch(
        f"""
WITH RECURSIVE minted AS (
  SELECT name FROM qm_tokens WHERE namespace = '' AND name = $1
  UNION
  SELECT t.name FROM qm_tokens AS t JOIN minted AS m ON t.minted_by = m.name
   WHERE t.namespace = ''
)
UPDATE qm_tokens SET revoked_at = coalesce(revoked_at, now())
WHERE namespace = '' AND name IN (SELECT name FROM minted)
  AND (revoked_at IS NULL OR name = $1) AND {with_context("$2")}
RETURNING {_COLS}""",
        name,
        text_of(None if ctx is None else ctx.defaults(verb="delete")),
    )
    rec = next((r for r in recs if r["name"] == name), None)
    return None if rec is None else _obj(rec)


async def purge(pool: asyncpg.Pool, after_s: float = 7 * 24 * 3600.0) -> int:
    """Delete the records of tokens revoked or expired more than ``after_s`` ago (listings and
    the revision log keep them that long); how many went."""
    status = await pool.execute(
        "DELETE FROM qm_tokens WHERE least(revoked_at, expires_at)"
        " < now() - make_interval(secs => $1::double precision)",
        float(after_s),
    )
    return int(status.rsplit(" ", 1)[-1])


def _obj(rec: asyncpg.Record) -> dict[str, Any]:
    obj = render(TOKEN, dict(rec))
    obj["apiVersion"] = AUTHN_VERSION
    return obj
