"""The revision stream under concurrent writers: exactly the committed changes, in commit order,
gap-free, resumable from any revision, and surviving an API server restart.

Writers use plain SQL (as a DBA would), in single- and multi-row transactions, some rolled back;
the watcher uses the HTTP watch API.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid

import httpx
import psycopg
import pytest

NS = "watch-correctness"
WRITERS = 8
ROUNDS = 40
PER_WRITER = 4


async def _writer(url: str, w: int, committed: list, multi: list, rng: random.Random) -> None:
    seq = 0
    async with await psycopg.AsyncConnection.connect(url) as conn:
        for j in range(PER_WRITER):
            seq += 1
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO configmaps (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
                    (uuid.uuid4(), NS, f"w{w}-{j}", json.dumps({"data": {"n": str(seq)}})),
                )
            committed.append((f"w{w}-{j}", seq))
        for _ in range(ROUNDS):
            mode = rng.choice(["single", "multi", "rollback"])
            names = rng.sample(
                [f"w{w}-{j}" for j in range(PER_WRITER)], 1 if mode == "single" else 3
            )
            writes = []
            try:
                async with conn.transaction():
                    for name in names:
                        seq += 1
                        await conn.execute(
                            "UPDATE configmaps SET spec = %s WHERE namespace = %s AND name = %s",
                            (json.dumps({"data": {"n": str(seq)}}), NS, name),
                        )
                        writes.append((name, seq))
                        await asyncio.sleep(rng.random() * 0.002)
                    if mode == "rollback":
                        raise _Rollback()
            except _Rollback:
                continue
            committed.extend(writes)
            if mode == "multi":
                multi.append(writes)


class _Rollback(Exception):
    pass


async def _collect(
    api_server,
    since: str,
    until_rev: int | None,
    want: int | None,
    timeout: float = 60.0,
    stop_name: str | None = None,
) -> list[dict]:
    """Watch configmaps in NS from ``since`` until the last revision or event count is reached."""
    events: list[dict] = []
    headers = {"Authorization": f"Bearer {api_server.token}"}
    deadline = time.monotonic() + timeout
    params = {"watch": "1", "resourceVersion": since, "allowWatchBookmarks": "true"}
    path = f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps"
    async with (
        httpx.AsyncClient(base_url=api_server.url, headers=headers, timeout=timeout) as c,
        c.stream("GET", path, params=params) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if not line:
                continue
            ev = json.loads(line)
            assert ev["type"] != "ERROR", ev
            if ev["type"] == "BOOKMARK":
                if (
                    until_rev is not None
                    and int(ev["object"]["metadata"]["resourceVersion"]) >= until_rev
                ):
                    break
                continue
            if stop_name is not None and ev["object"]["metadata"]["name"] == stop_name:
                break
            events.append(ev)
            rev = int(ev["object"]["metadata"]["resourceVersion"])
            if (until_rev is not None and rev >= until_rev) or (
                want is not None and len(events) >= want
            ):
                break
            if time.monotonic() > deadline:
                break
    return events


def _key(ev: dict) -> tuple[str, str, int]:
    obj = ev["object"]
    return (ev["type"], obj["metadata"]["name"], int(obj["data"]["n"]))


@pytest.mark.slow
async def test_watch_sees_exactly_committed_changes_in_order(api_server, pg_url) -> None:
    headers = {"Authorization": f"Bearer {api_server.token}"}
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as c:
        r = await c.post(
            "/apis/quaymaster.io/v1/namespaces",
            json={"apiVersion": "quaymaster.io/v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        assert r.status_code in (201, 409), r.text
        start = (await c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps")).json()
    since = start["metadata"]["resourceVersion"]

    committed: list[tuple[str, int]] = []
    multi: list[list[tuple[str, int]]] = []
    rng = random.Random(7)
    live = asyncio.create_task(
        _collect(api_server, since, None, None, timeout=120, stop_name="sentinel")
    )
    await asyncio.sleep(0.2)
    await asyncio.gather(
        *(_writer(pg_url, w, committed, multi, random.Random(rng.random())) for w in range(WRITERS))
    )
    expected_events = len(committed)
    final: dict[str, int] = {}
    for name, n in committed:
        final[name] = max(n, final.get(name, 0))
    # Wait until a list shows every object at its last committed write, then end the live watch.
    async with httpx.AsyncClient(base_url=api_server.url, headers=headers) as c:
        for _ in range(600):
            lst = (await c.get(f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps")).json()
            shown = {i["metadata"]["name"]: int(i["data"]["n"]) for i in lst["items"]}
            if shown == final:
                last_rev = int(lst["metadata"]["resourceVersion"])
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the list never showed the last committed writes")
        r = await c.post(
            f"/apis/quaymaster.io/v1/namespaces/{NS}/configmaps",
            json={
                "apiVersion": "quaymaster.io/v1",
                "kind": "ConfigMap",
                "metadata": {"name": "sentinel"},
                "data": {"n": "0"},
            },
        )
        assert r.status_code == 201, r.text
    live_events = await live
    events = await _collect(api_server, since, None, expected_events, timeout=60)
    assert [_key(e) for e in live_events] == [_key(e) for e in events], "live equals replayed"

    assert len(events) == expected_events
    seen = [(name, n) for _, name, n in map(_key, events)]
    assert sorted(seen) == sorted(committed), "a watcher must see exactly the committed writes"
    assert len(set(seen)) == len(seen), "each change exactly once"
    revs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert revs == sorted(revs) and len(set(revs)) == len(revs)
    assert revs == list(range(revs[0], revs[0] + len(revs))), "no gaps: only these writes ran"
    by_write = {(name, n): rev for (name, n), rev in zip(seen, revs, strict=True)}
    for tx in multi:
        tx_revs = sorted(by_write[w] for w in tx)
        assert tx_revs == list(range(tx_revs[0], tx_revs[0] + len(tx))), (
            "a transaction is contiguous"
        )
    last_n: dict[str, int] = {}
    for name, n in seen:
        assert n > last_n.get(name, 0), "per-object order follows commit order"
        last_n[name] = n

    with psycopg.connect(pg_url) as db:
        rows = db.execute(
            "SELECT revision, commit_lsn FROM qm_revision_log"
            " WHERE revision > (SELECT compacted_revision FROM qm_stream_state)"
            " ORDER BY revision"
        ).fetchall()
    log_revs = [r[0] for r in rows]
    assert log_revs == list(range(log_revs[0], log_revs[0] + len(log_revs))), "the log is gap-free"
    lsns = [int(str(r[1]).split("/")[0], 16) << 32 | int(str(r[1]).split("/")[1], 16) for r in rows]
    assert lsns == sorted(lsns), "revision order is commit order"

    # Resume from revisions we were handed: the rest of the sequence, exactly.
    for r in random.Random(3).sample(revs[:-1], 5):
        tail = await _collect(api_server, str(r), revs[-1], None)
        assert [int(e["object"]["metadata"]["resourceVersion"]) for e in tail] == [
            x for x in revs if x > r
        ]

    # After a restart of the API server, resuming loses nothing.
    pick = revs[len(revs) // 3]
    api_server.restart()
    tail = await _collect(api_server, str(pick), revs[-1], None)
    assert [_key(e) for e in tail] == [
        _key(e) for e in events if int(e["object"]["metadata"]["resourceVersion"]) > pick
    ]
    assert last_rev >= revs[-1]
