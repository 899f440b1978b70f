"""The store seals Secrets, and the re-encryption after a rotation (app.store.secret_rotation)
never overwrites a write it raced with, on a real database (ADR 0048)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
from pools import pool_on

from app.core import secretbox
from app.core.kinds import BY_KIND
from app.store import secret_keys, secret_rotation
from app.store.store import Store

SECRET = BY_KIND["Secret"]
NS = "reencrypt"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
async def pool(make_database: Callable[[str], str]) -> AsyncIterator[asyncpg.Pool]:
    async with pool_on(make_database("qm_reencrypt"), 4) as p:
        yield p


async def test_store_seals_and_reencrypt_loses_no_race(pool: asyncpg.Pool) -> None:
    store = Store(pool)
    body = {"metadata": {"namespace": NS, "name": "s"}, "type": "Opaque",
            "data": {"k": b64("first")}}  # fmt: skip
    created = await store.create(SECRET, body)
    assert secretbox.is_envelope(created.row["spec"]["data"])
    assert secret_keys.open_object(created.obj)["data"] == {"k": b64("first")}
    stale = await pool.fetchrow(
        "SELECT namespace, name, row_version, spec FROM secrets WHERE name = 's'"
    )
    await store.update(SECRET, {**body, "data": {"k": b64("second")}}, created.row_version)

    assert stale is not None
    ring = secret_keys.source().ring()
    progress = secret_rotation.Progress()
    resealed = secret_rotation._reseal(stale, ring, progress)
    assert resealed is not None
    assert await secret_rotation.swap(pool, [resealed], progress) == 1
    assert progress.conflicts == 1 and progress.reencrypted == 0
    now = await store.get(SECRET, NS, "s")
    assert secret_keys.open_object(now.obj)["data"] == {"k": b64("second")}

    # A row written before encryption (plaintext data) is sealed by the next pass.
    await pool.execute(
        "UPDATE secrets SET spec = $1 WHERE name = 's'", {"type": "Opaque", "data": {"k": "eA=="}}
    )
    assert (await secret_rotation.counts_by_key(pool)).get("") == 1
    await secret_rotation.reencrypt(pool, progress, settle_s=0)
    assert await secret_rotation.counts_by_key(pool) == {ring.active: 1}
    now = await store.get(SECRET, NS, "s")
    assert secret_keys.open_object(now.obj)["data"] == {"k": "eA=="}
