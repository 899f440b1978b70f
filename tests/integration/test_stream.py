"""The revision stream's operational behaviour: bookmarks, slot hygiene, and recovery after
the replication slot is lost."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from typing import Any

import httpx
import psycopg

from app.api.background import drop_abandoned_slots
from app.store.db import create_pool
from app.stream.revisioner import Revisioner, slot_name, streaming

NS = "stream-ops"


def _client(api_server) -> httpx.Client:  # type: ignore[no-untyped-def]
    return httpx.Client(
        base_url=api_server.url, timeout=30, headers={"Authorization": f"Bearer {api_server.token}"}
    )


def _ensure_ns(c: httpx.Client) -> None:
    r = c.post(
        "/apis/quaymaster.io/v1/namespaces",
        json={"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    assert r.status_code in (201, 409), r.text


def test_idle_watch_gets_a_truthful_bookmark(api_server) -> None:  # type: ignore[no-untyped-def]
    with _client(api_server) as c:
        _ensure_ns(c)
        rv = c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/secrets").json()["metadata"][
            "resourceVersion"
        ]
        events = []
        with c.stream(
            "GET",
            f"/apis/quaymaster.io/v1/namespaces/{NS}/secrets",
            params={
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "8",
            },
        ) as resp:
            for line in resp.iter_lines():
                if line:
                    events.append(json.loads(line))
                    break
        assert events and events[0]["type"] == "BOOKMARK"
        assert int(events[0]["object"]["metadata"]["resourceVersion"]) >= int(rv)


async def test_abandoned_slots_of_this_database_are_dropped(pg_url) -> None:  # type: ignore[no-untyped-def]
    name = f"qm_gone_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        dbname = db.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
    pool = await create_pool(pg_url)
    try:
        dropped = await drop_abandoned_slots(pool, slot_name(dbname))
    finally:
        await pool.close()
    assert name in dropped
    assert slot_name(dbname) not in dropped
    with psycopg.connect(pg_url) as db:
        names = [r[0] for r in db.execute("SELECT slot_name FROM pg_replication_slots")]
    assert name not in names and slot_name(dbname) in names


def test_a_lost_slot_is_rebuilt_and_nothing_committed_meanwhile_is_lost(api_server, pg_url) -> None:  # type: ignore[no-untyped-def]
    with _client(api_server) as c:
        _ensure_ns(c)
        r = c.post(
            f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps",
            json={
                "apiVersion": "quaymaster.io/v1",
                "kind": "ConfigMap",
                "metadata": {"name": "before"},
                "data": {"v": "1"},
            },
        )
        assert r.status_code == 201, r.text
        with psycopg.connect(pg_url, autocommit=True) as db:
            dbname = db.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
            slot = slot_name(dbname)
            # Kill the revisioner's replication connection and drop its slot, as if the slot
            # had been invalidated; then change data while no slot exists.
            for _ in range(100):
                pid = db.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
                if pid and pid[0]:
                    db.execute("SELECT pg_terminate_backend(%s)", (pid[0],))
                try:
                    db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    break
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.05)
            db.execute(
                "UPDATE configmaps SET spec = %s WHERE namespace = %s AND name = 'before'",
                (json.dumps({"data": {"v": "2"}}), NS),
            )
            db.execute(
                "INSERT INTO configmaps (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                (uuid.uuid4(), NS, "during", json.dumps({"data": {"v": "x"}})),
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps").json()
            data = {i["metadata"]["name"]: i["data"]["v"] for i in got["items"]}
            if data.get("before") == "2" and data.get("during") == "x":
                break
            time.sleep(0.2)
        assert data == {"before": "2", "during": "x"}
        r = c.post(
            f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps",
            json={
                "apiVersion": "quaymaster.io/v1",
                "kind": "ConfigMap",
                "metadata": {"name": "after"},
                "data": {"v": "3"},
            },
        )
        assert r.status_code == 201, r.text
    with psycopg.connect(pg_url) as db:
        floor = db.execute("SELECT compacted_revision FROM qm_stream_state").fetchone()[0]  # type: ignore[index]
        revs = [
            r[0]
            for r in db.execute(
                "SELECT revision FROM qm_revision_log WHERE revision > %s ORDER BY revision",
                (floor,),
            )
        ]
    assert revs == list(range(revs[0], revs[0] + len(revs))), "still gap-free after the reseed"


def test_truncate_by_sql_appears_as_deletions(api_server, pg_url) -> None:  # type: ignore[no-untyped-def]
    with _client(api_server) as c:
        _ensure_ns(c)
        for i in range(3):
            r = c.post(
                f"/apis/quaymaster.io/v1/namespaces/{NS}/poddisruptionbudgets",
                json={
                    "apiVersion": "quaymaster.io/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": f"pdb{i}"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}},
                },
            )
            assert r.status_code == 201, r.text
        rv = c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/poddisruptionbudgets").json()[
            "metadata"
        ]["resourceVersion"]
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute("TRUNCATE poddisruptionbudgets")
        seen = []
        with c.stream(
            "GET",
            f"/apis/quaymaster.io/v1/namespaces/{NS}/poddisruptionbudgets",
            params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "10"},
        ) as resp:
            for line in resp.iter_lines():
                if line:
                    ev = json.loads(line)
                    seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                    if len(seen) == 3:
                        break
        assert sorted(seen) == [("DELETED", "pdb0"), ("DELETED", "pdb1"), ("DELETED", "pdb2")]
        assert (
            c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/poddisruptionbudgets").json()["items"]
            == []
        )


def _until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_streaming_only_once_a_walsender_holds_the_slot(make_database: Any) -> None:
    """While the slot is still being created (it waits for running transactions) it shows as
    active, yet the revisioner has not reseeded nor started streaming: writes then would reach
    the log only through the reseed. ``streaming`` must say no until the walsender holds it."""
    url = make_database("qm_streaming")
    stop = threading.Event()
    thread = threading.Thread(target=Revisioner(url, retain_s=3600).run, args=(stop,))
    with psycopg.connect(url, autocommit=True) as db, psycopg.connect(url) as blocker:
        try:
            blocker.execute("SELECT txid_current()")  # an open transaction with an xid
            thread.start()
            _until(
                lambda: db.execute(
                    "SELECT 1 FROM pg_replication_slots WHERE active"
                    " AND database = current_database()"
                ).fetchone(),
                "the slot was never being created",
            )
            assert not streaming(db), "a slot still being created is not a stream"
            blocker.rollback()
            _until(lambda: streaming(db), "the revisioner never started streaming")
        finally:
            stop.set()
            thread.join(timeout=10)
            with contextlib.suppress(psycopg.Error):
                db.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE database = current_database() AND NOT active"
                )
