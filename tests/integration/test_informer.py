"""The scheduler's informer over the revision log: list at R, then the changes after R, in
order, of the chosen kinds only; deletions as 'D'; and Gone once compaction passes the position.

Runs on a database of its own with its own revisioner (the Gone test compacts the whole log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.core.errors import Gone
from app.stream.informer import APPLICATION_NAME, Change, LogInformer
from app.stream.logwriter import compact

NS = "informer"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def own_db(make_database: Any, revisioner_on: Any) -> Iterator[str]:
    url = make_database("qm_informer")
    with revisioner_on(url):
        yield url


@pytest.fixture
def db(own_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(own_db, autocommit=True) as conn:
        yield conn


def _put(db: psycopg.Connection, table: str, name: str, spec: dict) -> None:
    cur = db.execute(
        f"UPDATE {table} SET spec = %s WHERE namespace = %s AND name = %s",
        (json.dumps(spec), NS, name),
    )
    if cur.rowcount == 0:
        db.execute(
            f"INSERT INTO {table} (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
            (uuid.uuid4(), NS, name, json.dumps(spec)),
        )


def _cm(db: psycopg.Connection, name: str, v: str) -> None:
    _put(db, "configmaps", name, {"data": {"v": v}})


def _secret(db: psycopg.Connection, name: str) -> None:
    _put(db, "secrets", name, {"data": {"k": "dg=="}})


def _delete(db: psycopg.Connection, table: str, name: str) -> None:
    db.execute(f"DELETE FROM {table} WHERE namespace = %s AND name = %s", (NS, name))


async def _logged(db: psycopg.Connection) -> int:
    """Wait until the revisioner has logged everything committed so far; the last revision."""
    target = db.execute("SELECT last_value FROM qm_row_version").fetchone()[0]  # type: ignore[index]
    for _ in range(400):
        got = db.execute("SELECT max(row_version) FROM qm_revision_log").fetchone()[0]  # type: ignore[index]
        if got is not None and got >= target:
            return int(db.execute("SELECT last_revision FROM qm_stream_state").fetchone()[0])  # type: ignore[index]
        await asyncio.sleep(0.05)
    raise AssertionError("the revisioner did not log the writes")


async def _collect(it: AsyncIterator[list[Change]], n: int, timeout: float = 10.0) -> list[Change]:
    got: list[Change] = []

    async def take() -> None:
        async for batch in it:
            got.extend(batch)
            if len(got) >= n:
                return

    await asyncio.wait_for(take(), timeout)
    return got


def _mine(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.namespace == NS]


async def test_list_then_changes_in_order_for_the_chosen_kinds(
    db: psycopg.Connection, own_db: str
) -> None:
    _cm(db, "a", "1")
    _cm(db, "b", "1")
    _cm(db, "a", "2")
    _secret(db, "s")
    _cm(db, "gone", "1")
    _delete(db, "configmaps", "gone")
    upto = await _logged(db)

    inf = LogInformer(own_db, ["ConfigMap"])
    rev, items = await inf.list()
    assert rev >= upto
    listed = {c.name: c for c in _mine(items)}
    assert set(listed) == {"a", "b"}, "only live objects of the chosen kinds"
    a = listed["a"]
    assert a.kind == "ConfigMap" and a.op == "M" and a.obj["data"] == {"v": "2"}
    assert a.obj["metadata"]["name"] == "a" and a.obj["metadata"]["uid"] == a.uid
    assert a.obj["metadata"]["resourceVersion"] == str(a.revision)
    assert all(c.revision <= rev for c in items)
    assert listed["b"].op == "A"

    # Everything after R, woken by NOTIFY: only ConfigMaps, in revision order.
    async with contextlib.aclosing(inf.changes(rev)) as it:
        await asyncio.sleep(0.2)  # let the tail settle on an idle log
        _cm(db, "a", "3")
        _secret(db, "s2")
        _cm(db, "c", "1")
        _delete(db, "secrets", "s")
        _delete(db, "configmaps", "b")
        started = time.monotonic()
        got = await _collect(it, 3)
        assert time.monotonic() - started < 5
    assert [(c.op, c.name) for c in got] == [("M", "a"), ("A", "c"), ("D", "b")]
    assert all(c.kind == "ConfigMap" for c in got)
    assert [c.revision for c in got] == sorted(c.revision for c in got)
    assert got[0].revision > rev
    assert got[0].obj["data"] == {"v": "3"}
    deleted = got[2]
    assert deleted.obj["metadata"]["name"] == "b" and deleted.uid == listed["b"].uid
    assert deleted.row_version >= listed["b"].row_version
    assert inf.revision >= got[-1].revision

    # A relist shows the same state the changes led to.
    rev2, items2 = await inf.list()
    assert rev2 >= got[-1].revision
    assert {c.name: c.obj["data"]["v"] for c in _mine(items2)} == {"a": "3", "c": "1"}


async def test_several_kinds_and_batches(db: psycopg.Connection, own_db: str) -> None:
    inf = LogInformer(own_db, {"ConfigMap", "Secret"}, batch=3)
    rev, _ = await inf.list()
    for i in range(5):
        _cm(db, f"m{i}", "x")
        _secret(db, f"t{i}")
    async with contextlib.aclosing(inf.changes(rev)) as it:
        got = await _collect(it, 10)
    assert [(c.kind, c.name) for c in got] == [
        (k, f"{p}{i}") for i in range(5) for k, p in (("ConfigMap", "m"), ("Secret", "t"))
    ]
    assert [c.revision for c in got] == list(range(rev + 1, rev + 11))


async def test_an_idle_informer_moves_past_other_kinds(db: psycopg.Connection, own_db: str) -> None:
    inf = LogInformer(own_db, ["Node"])
    rev, _ = await inf.list()
    _cm(db, "unrelated", "1")
    upto = await _logged(db)

    async with contextlib.aclosing(inf.changes(rev)) as it:
        with pytest.raises(TimeoutError):
            await _collect(it, 1, timeout=1.5)
    assert inf.revision >= upto, "the position moves with the log even when nothing matches"


async def test_gone_once_the_log_is_compacted_past_the_position(
    db: psycopg.Connection, own_db: str
) -> None:
    inf = LogInformer(own_db, ["ConfigMap"])
    old, _ = await inf.list()
    for v in range(3):
        _cm(db, "k", str(v))
    upto = await _logged(db)
    compact(db, upto)
    floor = db.execute("SELECT compacted_revision FROM qm_stream_state").fetchone()[0]  # type: ignore[index]
    assert floor == upto > old

    with pytest.raises(Gone):
        async with contextlib.aclosing(inf.changes(old)) as it:
            await _collect(it, 1)

    # Relisting gives a position from which the informer carries on.
    rev, items = await inf.list()
    assert rev >= floor
    assert {c.name: c.obj["data"]["v"] for c in _mine(items)}["k"] == "2"
    async with contextlib.aclosing(inf.changes(rev)) as it:
        _cm(db, "k", "after")
        got = await _collect(it, 1)
    assert got[0].name == "k" and got[0].obj["data"] == {"v": "after"}


async def test_the_tail_survives_losing_its_connections(
    db: psycopg.Connection, own_db: str
) -> None:
    inf = LogInformer(own_db, ["ConfigMap"])
    rev, _ = await inf.list()
    async with contextlib.aclosing(inf.changes(rev)) as it:
        _cm(db, "r", "1")
        assert [c.name for c in await _collect(it, 1)] == ["r"]
        killed = db.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (APPLICATION_NAME,),
        ).fetchone()[0]  # type: ignore[index]
        assert killed == 2, "the query connection and the LISTEN connection"
        _cm(db, "r", "2")
        _cm(db, "r", "3")
        got = await _collect(it, 2)
    assert [c.obj["data"]["v"] for c in got] == ["2", "3"]


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError):
        LogInformer("postgresql://unused", ["Pods"])
    with pytest.raises(ValueError):
        LogInformer("postgresql://unused", [])
