"""Tokens in the database and in the revision stream: hashed at rest, expiring, revocable,
revoked with their service account, forgotten by an authenticator as soon as its watch cache
shows the change; and the audit trail recording a principal's groups."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import asyncpg
import pytest

from app.api.auth import Authenticator
from app.core.audit import WriteContext
from app.core.errors import NotFound, Unauthorized
from app.core.kinds import BY_KIND, TOKEN
from app.store import tokens
from app.store.db import create_pool
from app.store.store import Store
from app.store.tokens import User
from app.stream.cache import WatchCache
from workers.controllers.namespace import ensure_default_account

SA, CM, NS = BY_KIND["ServiceAccount"], BY_KIND["ConfigMap"], BY_KIND["Namespace"]


@pytest.fixture(scope="module")
def url(make_database: Callable[[str], str], revisioner_on: Any) -> Iterator[str]:
    db = make_database("tokens")
    with revisioner_on(db):
        yield db


@pytest.fixture
async def pool(url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def cache(url: str) -> AsyncIterator[WatchCache]:
    c = WatchCache()
    await c.start(url)
    try:
        yield c
    finally:
        await c.stop()


async def until(check: Callable[[], Any], timeout: float = 5.0) -> float:
    """Poll ``check`` (awaited if it returns an awaitable) until truthy; seconds it took."""
    start = time.monotonic()
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, "condition not met in time"
        await asyncio.sleep(0.01)


async def refused(auth: Authenticator, token: str) -> bool:
    try:
        await auth.user_for(f"Bearer {token}")
    except Unauthorized:
        return True
    return False


async def test_only_the_digest_is_stored(pool: asyncpg.Pool) -> None:
    minted = await tokens.mint(pool, "alice", ("team-a",), 3600, "laptop")
    rows = await pool.fetch("SELECT * FROM qm_tokens")
    text = " ".join(str(dict(r)) for r in rows)
    assert minted.token not in text
    assert tokens.digest(minted.token) in text
    log = await pool.fetchval("SELECT string_agg(object::text, ' ') FROM qm_revision_log")
    assert minted.token not in (log or "") and tokens.digest(minted.token) not in (log or "")
    assert minted.obj["metadata"]["name"] == tokens.token_id(minted.token)
    assert minted.obj["spec"]["user"] == "alice" and minted.obj["spec"]["groups"] == ["team-a"]
    assert "expirationTimestamp" in minted.obj["spec"]


async def test_expired_and_revoked_tokens_are_refused(pool: asyncpg.Pool) -> None:
    minted = await tokens.mint(pool, "bob", (), 3600)
    cred = await tokens.lookup(pool, minted.token)
    assert cred is not None and cred.user.name == "bob" and cred.user.groups == ()
    assert cred.user.token_id == minted.obj["metadata"]["name"] and cred.user.expires_at
    await pool.execute(
        "UPDATE qm_tokens SET expires_at = now() - interval '1 second' WHERE token_sha256 = $1",
        tokens.digest(minted.token),
    )
    assert await tokens.lookup(pool, minted.token) is None
    other = await tokens.mint(pool, "bob", (), 3600)
    admin = WriteContext(principal="admin")
    revoked = await tokens.revoke(pool, other.obj["metadata"]["name"], admin)
    assert revoked is not None and revoked["status"]["revokedAt"]
    assert await tokens.lookup(pool, other.token) is None
    again = await tokens.revoke(pool, other.obj["metadata"]["name"], admin)
    assert again is not None and again["status"]["revokedAt"] == revoked["status"]["revokedAt"]


async def test_revocation_reaches_the_authenticator_through_the_stream(
    pool: asyncpg.Pool, cache: WatchCache
) -> None:
    auth = Authenticator(pool, ttl_s=3600)  # only the stream can make it forget
    follower = asyncio.create_task(auth.follow(cache))
    try:
        await asyncio.sleep(0)
        minted = await tokens.mint(pool, "carol", ("team-c",), 3600)
        user = await auth.user_for(f"Bearer {minted.token}")
        assert user.name == "carol"
        assert user.groups == ("team-c", "system:authenticated")
        await pool.execute(  # by hand, as a DBA would: the stream still carries it
            "UPDATE qm_tokens SET revoked_at = now() WHERE token_sha256 = $1",
            tokens.digest(minted.token),
        )
        took = await until(lambda: refused(auth, minted.token), timeout=1.0)
        assert took < 1.0
        assert cache.get(TOKEN, "", minted.obj["metadata"]["name"]) is not None
    finally:
        follower.cancel()


async def test_deleting_a_service_account_revokes_its_tokens(
    pool: asyncpg.Pool, cache: WatchCache
) -> None:
    store = Store(pool)
    await store.create(NS, {"metadata": {"name": "robots"}, "status": {"phase": "Active"}})
    await store.create(SA, {"metadata": {"name": "builder", "namespace": "robots"}})
    minted = await tokens.create_service_account_token(pool, "robots", "builder", 600)
    assert minted.obj["spec"]["user"] == "system:serviceaccount:robots:builder"
    assert minted.obj["spec"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:robots",
    ]
    auth = Authenticator(pool, ttl_s=3600)
    follower = asyncio.create_task(auth.follow(cache))
    try:
        await asyncio.sleep(0)
        assert (await auth.user_for(f"Bearer {minted.token}")).name.endswith(":builder")
        await store.delete(SA, "robots", "builder")
        await until(lambda: refused(auth, minted.token), timeout=1.0)
        record = await tokens.get_token(pool, minted.obj["metadata"]["name"])
        assert record is not None and record["status"]["revokedAt"]
    finally:
        follower.cancel()
    with pytest.raises(NotFound):
        await tokens.create_service_account_token(pool, "robots", "builder", 600)


async def test_history_rows_carry_the_principals_groups(pool: asyncpg.Pool) -> None:
    store = Store(pool)
    user = User("dana", ("team-d", "system:authenticated"))
    dana = WriteContext(principal=user.name, groups=user.groups)
    await store.create(NS, {"metadata": {"name": "audited"}, "status": {"phase": "Active"}}, dana)
    made = await store.create(
        CM, {"metadata": {"name": "c", "namespace": "audited"}, "data": {}}, dana
    )
    await store.update(CM, {**made.obj, "data": {"k": "v"}}, made.row_version, dana)
    await store.delete(CM, "audited", "c", ctx=WriteContext(principal="plain-name"))
    rows = await pool.fetch(
        "SELECT principal, groups, verb FROM qm_history"
        " WHERE (namespace = 'audited' OR name = 'audited') AND op <> 'summary' ORDER BY id"
    )
    assert [(r["principal"], r["groups"], r["verb"]) for r in rows] == [
        ("dana", ["team-d", "system:authenticated"], "create"),
        ("dana", ["team-d", "system:authenticated"], "create"),
        ("dana", ["team-d", "system:authenticated"], "update"),
        ("plain-name", None, "delete"),
    ]


async def test_each_namespace_gets_a_default_service_account(pool: asyncpg.Pool) -> None:
    store = Store(pool)
    await store.create(NS, {"metadata": {"name": "fresh"}, "status": {"phase": "Active"}})
    await ensure_default_account(store, "fresh")
    first = await store.get(SA, "fresh", "default")
    await ensure_default_account(store, "fresh")  # idempotent
    assert (await store.get(SA, "fresh", "default")).uid == first.uid
    await store.delete(SA, "fresh", "default")
    await ensure_default_account(store, "fresh")  # a deleted one comes back
    assert (await store.get(SA, "fresh", "default")).uid != first.uid


async def test_long_dead_records_are_purged(pool: asyncpg.Pool) -> None:
    live = await tokens.mint(pool, "kim", (), 3600)
    old = await tokens.mint(pool, "kim", (), 3600)
    recent = await tokens.mint(pool, "kim", (), 3600)
    await pool.execute(
        "UPDATE qm_tokens SET revoked_at = now() - interval '8 days' WHERE token_sha256 = $1",
        tokens.digest(old.token),
    )
    await tokens.revoke(pool, recent.obj["metadata"]["name"], None)
    await tokens.purge(pool)
    names = {o["metadata"]["name"] for o in await tokens.list_tokens(pool, "kim")}
    assert names == {live.obj["metadata"]["name"], recent.obj["metadata"]["name"]}
