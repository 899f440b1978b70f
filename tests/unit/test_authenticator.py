"""The authenticator's cache: answers kept until the token's record changes, never a stale
answer from a lookup that overlapped a change, expiry checked on every request."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.api import auth as auth_module
from app.api.auth import Authenticator
from app.core.errors import Unauthorized
from app.store.tokens import Credential, User


class FakeLookups:
    """Stands in for the database: answers from ``creds``, counting queries; ``gate`` (when
    set) holds each query until released."""

    def __init__(self) -> None:
        self.creds: dict[str, Credential | None] = {}
        self.queries = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, pool: Any, token: str) -> Credential | None:
        self.queries += 1
        if self.gate is not None:
            await self.gate.wait()
        return self.creds.get(token)


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> FakeLookups:
    fake = FakeLookups()
    monkeypatch.setattr(auth_module, "lookup", fake)
    return fake


def cred(name: str, uid: str, expires: datetime | None = None) -> Credential:
    return Credential(User(name, ("g",), "id-" + uid), uid, expires)


async def test_an_answer_is_cached_until_its_record_changes(db: FakeLookups) -> None:
    auth = Authenticator(pool=None, ttl_s=3600)  # type: ignore[arg-type]
    db.creds["t"] = cred("alice", "u1")
    user = await auth.user_for("Bearer t")
    assert (user.name, user.groups) == ("alice", ("g", "system:authenticated"))
    await auth.user_for("Bearer t")
    assert db.queries == 1
    db.creds["t"] = None  # revoked
    auth.forget("u1")
    with pytest.raises(Unauthorized):
        await auth.user_for("Bearer t")
    assert db.queries == 2


async def test_a_lookup_overlapping_a_change_is_not_cached(db: FakeLookups) -> None:
    auth = Authenticator(pool=None, ttl_s=3600)  # type: ignore[arg-type]
    db.creds["t"] = cred("alice", "u1")
    db.gate = asyncio.Event()
    pending = asyncio.create_task(auth.user_for("Bearer t"))
    await asyncio.sleep(0)  # the lookup is in flight
    auth.forget("u1")  # the revocation arrives meanwhile
    db.gate.set()
    assert (await pending).name == "alice"  # answered from the older read...
    db.gate = None
    db.creds["t"] = None
    with pytest.raises(Unauthorized):  # ...but not remembered
        await auth.user_for("Bearer t")


async def test_expiry_is_checked_on_every_request(db: FakeLookups) -> None:
    auth = Authenticator(pool=None, ttl_s=3600)  # type: ignore[arg-type]
    db.creds["soon"] = cred("bob", "u2", datetime.now(UTC) + timedelta(hours=1))
    db.creds["gone"] = cred("bob", "u3", datetime.now(UTC) - timedelta(seconds=1))
    assert (await auth.user_for("Bearer soon")).name == "bob"
    with pytest.raises(Unauthorized):
        await auth.user_for("Bearer gone")


@pytest.mark.parametrize("header", [None, "", "Basic abc", "bearer t"])
async def test_a_bearer_token_is_required(db: FakeLookups, header: str | None) -> None:
    with pytest.raises(Unauthorized):
        await Authenticator(pool=None).user_for(header)  # type: ignore[arg-type]
    assert db.queries == 0
