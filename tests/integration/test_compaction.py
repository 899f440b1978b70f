"""Compaction keeps the latest entry of every live object, so a cache loaded from the compacted
log holds exactly the current state, and watching from below the compacted floor is 410."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import psycopg
import pytest

from app.core.errors import Gone
from app.core.kinds import BY_KIND
from app.stream.cache import WatchCache, Watcher
from app.stream.logwriter import compact

NS = "compaction"


async def test_compacted_log_still_holds_current_state(api_server, pg_url) -> None:  # type: ignore[no-untyped-def]
    h = {"Authorization": f"Bearer {api_server.token}"}
    with httpx.Client(base_url=api_server.url, headers=h) as c:
        assert c.post(
            "/apis/quaymaster.io/v1/namespaces", json={"metadata": {"name": NS}}
        ).status_code in (201, 409)
    with psycopg.connect(pg_url, autocommit=True) as db:
        for i in range(5):
            db.execute(
                "INSERT INTO configmaps (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                (uuid.uuid4(), NS, f"c{i}", json.dumps({"data": {"v": "0"}})),
            )
        for v in range(1, 4):
            db.execute(
                "UPDATE configmaps SET spec = %s WHERE namespace = %s",
                (json.dumps({"data": {"v": str(v)}}), NS),
            )
        db.execute("DELETE FROM configmaps WHERE namespace = %s AND name = 'c4'", (NS,))
        deadline = time.monotonic() + 20
        upto = 0
        while time.monotonic() < deadline:
            upto = db.execute("SELECT last_revision FROM qm_stream_state").fetchone()[0]  # type: ignore[index]
            n = db.execute(
                "SELECT count(*) FROM qm_revision_log WHERE namespace = %s AND op = 'D'"
                " AND name = 'c4'",
                (NS,),
            ).fetchone()[0]  # type: ignore[index]
            if n:
                break
            time.sleep(0.1)
        compact(db, upto, batch=7)
        rows = db.execute(
            "SELECT name, op::text, object->'data'->>'v' FROM qm_revision_log"
            " WHERE namespace = %s AND kind = 'ConfigMap' ORDER BY name",
            (NS,),
        ).fetchall()
        floor = db.execute("SELECT compacted_revision FROM qm_stream_state").fetchone()[0]  # type: ignore[index]
    assert rows == [(f"c{i}", "M", "3") for i in range(4)], "latest entry of each live object only"
    assert floor == upto
    cache = WatchCache()
    await cache.start(pg_url)
    try:
        kind = BY_KIND["ConfigMap"]
        assert sorted(c.name for c in cache.iter(kind, NS)) == ["c0", "c1", "c2", "c3"]
        assert all(json.loads(c.raw)["data"]["v"] == "3" for c in cache.iter(kind, NS))
        with pytest.raises(Gone):
            cache.watch(Watcher(kind, NS, None, None), floor - 1)
    finally:
        await cache.stop()
