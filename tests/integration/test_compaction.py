"""Compaction keeps the latest entry of every live object, so a cache loaded from the compacted
log holds exactly the current state; watching below the compacted floor is 410; and a cache that
fell behind compaction reloads and keeps serving writers.

Runs on a database of its own (compacting everything at once would disturb the shared one).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.core.errors import Gone
from app.core.kinds import BY_KIND
from app.stream.cache import WatchCache, Watcher
from app.stream.logwriter import compact

NS = "compaction"
CM = BY_KIND["ConfigMap"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def own_db(make_database: Any, revisioner_on: Any) -> Iterator[str]:
    url = make_database("qm_compact")
    with revisioner_on(url):
        yield url


def _write(db: psycopg.Connection, names: list[str], value: str) -> None:
    for name in names:
        cur = db.execute(
            "UPDATE configmaps SET spec = %s WHERE namespace = %s AND name = %s",
            (json.dumps({"data": {"v": value}}), NS, name),
        )
        if cur.rowcount == 0:
            db.execute(
                "INSERT INTO configmaps (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                (uuid.uuid4(), NS, name, json.dumps({"data": {"v": value}})),
            )


async def _logged(db: psycopg.Connection, deleted: tuple[str, ...] = ()) -> int:
    """Wait until the revisioner has logged everything committed so far; the last revision.
    A delete leaves no row version behind, so the names ``deleted`` are waited for as ``D``
    entries (a delete logged after the wait would sit above the compaction cutoff)."""
    target = db.execute("SELECT max(row_version) FROM configmaps").fetchone()[0]  # type: ignore[index]
    for _ in range(200):
        got = db.execute("SELECT max(row_version) FROM qm_revision_log").fetchone()[0]  # type: ignore[index]
        gone = db.execute(
            "SELECT count(DISTINCT name) FROM qm_revision_log WHERE op = 'D' AND name = ANY(%s)",
            (list(deleted),),
        ).fetchone()[0]  # type: ignore[index]
        if got is not None and got >= target and gone == len(deleted):
            return int(db.execute("SELECT last_revision FROM qm_stream_state").fetchone()[0])  # type: ignore[index]
        await asyncio.sleep(0.05)
    raise AssertionError("the revisioner did not log the writes")


async def test_compacted_log_still_holds_current_state(own_db: str) -> None:
    with psycopg.connect(own_db, autocommit=True) as db:
        names = [f"c{i}" for i in range(5)]
        for v in range(4):
            _write(db, names, str(v))
        db.execute("DELETE FROM configmaps WHERE namespace = %s AND name = 'c4'", (NS,))
        upto = await _logged(db, deleted=("c4",))
        compact(db, upto, batch=7)
        rows = db.execute(
            "SELECT name, op::text, object->'data'->>'v' FROM qm_revision_log"
            " WHERE namespace = %s ORDER BY name",
            (NS,),
        ).fetchall()
        floor = db.execute("SELECT compacted_revision FROM qm_stream_state").fetchone()[0]  # type: ignore[index]
    assert rows == [(f"c{i}", "M", "3") for i in range(4)], "latest entry of each live object only"
    assert floor == upto
    cache = WatchCache()
    await cache.start(own_db)
    try:
        assert sorted(c.name for c in cache.iter(CM, NS)) == ["c0", "c1", "c2", "c3"]
        assert all(json.loads(c.raw)["data"]["v"] == "3" for c in cache.iter(CM, NS))
        with pytest.raises(Gone):
            cache.watch(Watcher(CM, NS, None, None), floor - 1)
    finally:
        await cache.stop()


async def test_a_cache_behind_compaction_reloads_and_keeps_serving(own_db: str) -> None:
    cache = WatchCache()
    await cache.start(own_db)
    await cache.stop()  # the cache stops reading, as if its server had stalled
    watcher = Watcher(CM, NS, None, None)
    cache.watch(watcher, cache.revision)
    with psycopg.connect(own_db, autocommit=True) as db:
        for v in range(10, 13):
            _write(db, ["c0", "c1"], str(v))
        compact(db, await _logged(db), batch=5)
        cache._task = asyncio.create_task(
            cache._tail(await __import__("asyncpg").connect(own_db, statement_cache_size=0), own_db)
        )
        for _ in range(100):
            if json.loads(cache.get(CM, NS, "c0").raw)["data"]["v"] == "12":  # type: ignore[union-attr]
                break
            await asyncio.sleep(0.05)
        assert json.loads(cache.get(CM, NS, "c0").raw)["data"]["v"] == "12"  # type: ignore[union-attr]
        assert watcher.overflowed, "a watch that missed compacted events is ended"
        # A writer after the reload is answered as usual.
        _write(db, ["c1"], "after")
        version = db.execute(
            "SELECT row_version FROM configmaps WHERE namespace = %s AND name = 'c1'", (NS,)
        ).fetchone()[0]  # type: ignore[index]
        uid = db.execute(
            "SELECT uid::text FROM configmaps WHERE namespace = %s AND name = 'c1'", (NS,)
        ).fetchone()[0]  # type: ignore[index]
    try:
        got = await cache.wait_for(uid, version, timeout=10)
        assert json.loads(got.raw)["data"]["v"] == "after"
    finally:
        await cache.stop()
