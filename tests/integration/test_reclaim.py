"""Reclaimed capacity for batch, end to end: real PostgreSQL and revisioner, real Redis holding
the usage samples, a real Celery worker and beat running the reclaim controller, and the real
scheduler placing batch pods on the room production lends.

The story: a node with 4 CPU, a production pod requesting 3 CPU and using 0.5 CPU. The node
lends 4 + 3 - 0.5 - 0.4 = 6.1 CPU to batch and the scheduler fills it with batch pods beyond
allocatable. Production's usage then rises to 3 CPU: the figure drops to 3.6 CPU at once and
batch pods are evicted, lowest priority first, until the requests fit; production is untouched.
Also: a node without recent samples lends nothing (woken by the dispatcher alone), and a status
write that loses a race to another writer evicts nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis
import redis.asyncio as aioredis
from plane import Plane, start_dispatcher, start_worker

from app.core.controllers import reclaim as core
from app.core.kinds import BY_KIND
from app.devstack.supervise import free_port
from app.store.db import create_pool
from app.store.store import Store
from app.store.usage import NodeSample, PodUsage, UsageStore
from workers.controllers import reclaim as shell
from workers.controllers.apply import with_version
from workers.controllers.reclaim import AFTER_EVICTION_SECONDS, RACE_RETRY_SECONDS, apply, rooms
from workers.runtime import Runtime, key_text

NS = "reclaim"
NODE = "n1"
WEB_UID = str(uuid.uuid4())


def add_node(p: Plane, status_extra: dict[str, Any] | None = None, name: str = NODE) -> None:
    status = {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
        **(status_extra or {}),
    }
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1"}
    p.db.execute(
        "INSERT INTO nodes (uid, name, labels, status) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), name, json.dumps(labels), json.dumps(status)),
    )


def add_pod(p: Plane, name: str, priority: int, cpu: str, node: str | None, uid: str = "") -> None:
    requests = {"cpu": cpu, "memory": "256Mi"}
    spec: dict[str, Any] = {
        "priority": priority,
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}],
    }
    if node is not None:
        spec["nodeName"] = node
    p.db.execute(
        "INSERT INTO pods (uid, namespace, name, spec) VALUES (%s, %s, %s, %s)",
        (uid or uuid.uuid4(), NS, name, json.dumps(spec)),
    )


def record(p: Plane, web_cpu: int, count: int = 1, node: str = NODE) -> None:
    """``count`` samples of the node, the newest now, with production's pod at ``web_cpu``."""

    async def go() -> None:
        client = aioredis.Redis.from_url(p.env["QM_BROKER_URL"])
        store = UsageStore(client)
        now = time.time()
        for i in reversed(range(count)):
            web = PodUsage(NS, "web", WEB_UID, 2000, web_cpu, 512 << 20)
            batch = PodUsage(NS, "b-top", "x", 200, 400, 128 << 20)
            sample = NodeSample(node, now - 10 * i, web_cpu + 400, 640 << 20, (web, batch))
            await store.record(sample)
        await client.aclose()

    asyncio.run(go())


def batch_allocatable(p: Plane, node: str = NODE) -> dict[str, Any] | None:
    row = p.db.execute("SELECT status->'batchAllocatable' FROM nodes WHERE name = %s", (node,))
    found = row.fetchone()
    return found[0] if found else None


def live(p: Plane, node: str = NODE) -> set[str]:
    rows = p.db.execute(
        "SELECT name FROM pods WHERE node_name = %s AND deletion_timestamp IS NULL", (node,)
    ).fetchall()
    return {r[0] for r in rows}


def start_controller(p: Plane, tmp_path: Path) -> None:
    p.env["QM_RECLAIM_SECONDS"] = "1"
    start_worker(p)
    p.start(
        "-m", "celery", "-A", "workers.app", "beat", "--loglevel=WARNING",
        "--schedule", str(tmp_path / "beat-schedule"),
    )  # fmt: skip


def test_production_usage_rising_takes_back_what_batch_borrowed(
    plane: Plane, tmp_path: Path
) -> None:
    add_node(plane)
    add_pod(plane, "web", 2000, "3", NODE, uid=WEB_UID)
    record(plane, 500, count=6)
    start_controller(plane, tmp_path)
    plane.start("-m", "app.scheduler", "--metrics-port", str(free_port()))
    plane.wait(
        lambda: (batch_allocatable(plane) or {}).get("cpu") == "6100m",
        what="batch-allocatable 6100m",
    )
    # 3 CPU of batch: with allocatable alone only 1 CPU would fit beside production's 3.
    for name, prio, cpu in [("b-low", 10, "1"), ("b-mid", 50, "1"), ("b-high", 100, "500m"),
                            ("b-top", 200, "500m")]:  # fmt: skip
        add_pod(plane, name, prio, cpu, None)
    everyone = {"web", "b-low", "b-mid", "b-high", "b-top"}
    plane.wait(lambda: live(plane) == everyone, what="every batch pod bound to the node")

    record(plane, 3000)  # production's usage rises: the latest sample counts at once
    plane.wait(
        lambda: (batch_allocatable(plane) or {}).get("cpu") == "3600m",
        what="batch-allocatable 3600m",
    )
    # 6 CPU requested, 3.6 allowed: b-low, b-mid and b-high go (3 CPU left), b-top stays.
    plane.wait(lambda: live(plane) == {"web", "b-top"}, what="the batch evictions")
    time.sleep(3.0)  # further reconciles take nothing more
    assert live(plane) == {"web", "b-top"}
    web = plane.db.execute("SELECT deletion_timestamp, status FROM pods WHERE name = 'web'")
    deleted_at, web_status = web.fetchone()  # type: ignore[misc]
    assert deleted_at is None and "DisruptionTarget" not in json.dumps(web_status)

    evicted = plane.db.execute(
        "SELECT name, status->'conditions', deletion_grace_period_seconds FROM pods"
        " WHERE deletion_timestamp IS NOT NULL ORDER BY name"
    ).fetchall()
    assert [r[0] for r in evicted] == ["b-high", "b-low", "b-mid"]
    for _name, conditions, grace in evicted:
        target = [c for c in conditions if c["type"] == "DisruptionTarget"]
        assert target and target[0]["reason"] == "EvictionByReclaim", conditions
        assert grace == 5  # the pod's own grace period
    reasons = plane.db.execute(
        "SELECT spec->'involvedObject'->>'name', spec->>'type' FROM events"
        " WHERE spec->>'reason' IN ('Evicted', 'Reclaimed') ORDER BY 1"
    ).fetchall()
    assert reasons == [("b-high", "Warning"), ("b-low", "Warning"), ("b-mid", "Warning"),
                       (NODE, "Warning")]  # fmt: skip
    # Production's requests are honoured: what still holds room fits under the new figure.
    held = plane.db.execute(
        "SELECT sum(req_cpu_milli) FROM pods WHERE node_name = %s AND deletion_timestamp IS NULL",
        (NODE,),
    ).fetchone()
    assert held is not None and held[0] <= 3600


def test_without_recent_samples_the_node_lends_nothing(plane: Plane) -> None:
    start_worker(plane)
    start_dispatcher(plane)  # no beat: the node's change alone wakes it
    add_node(plane, {"batchAllocatable": {"cpu": "6", "memory": "12Gi"}})
    add_pod(plane, "web", 2000, "3", NODE)
    add_pod(plane, "b-1", 1, "500m", NODE)
    add_pod(plane, "b-2", 2, "1", NODE)
    plane.wait(lambda: batch_allocatable(plane) is None, what="batch-allocatable removed")
    # Allocatable alone: 4.5 CPU held, 4 allowed; the lower-priority pod goes.
    plane.wait(lambda: live(plane) == {"web", "b-2"}, what="b-1 evicted")


def test_a_status_write_that_loses_a_race_evicts_nothing(plane: Plane) -> None:
    add_node(plane, {"batchAllocatable": {"cpu": "6", "memory": "12Gi"}})
    add_pod(plane, "web", 2000, "3", NODE)
    add_pod(plane, "b-1", 1, "1500m", NODE)

    async def plan_then_apply(race: bool) -> float | None:
        pool = await create_pool(plane.url, 1, 2)
        try:
            store = Store(pool)
            node = await store.get(BY_KIND["Node"], "", NODE)
            now = time.time()
            plan = core.reconcile(with_version(node), await rooms(pool, NODE), core.NO_SAMPLES, now,
                                  core.Config())  # fmt: skip
            assert [e.name for e in plan.evictions] == ["b-1"] and plan.status is not None
            if race:  # the agent writes the node's status in between
                plane.db.execute(
                    "UPDATE nodes SET status = status || '{\"nodeInfo\": {}}' WHERE name = %s",
                    (NODE,),
                )
            return await apply(store, node, plan, now)
        finally:
            await pool.close()

    assert asyncio.run(plan_then_apply(race=True)) == RACE_RETRY_SECONDS
    assert batch_allocatable(plane) == {"cpu": "6", "memory": "12Gi"}  # not overwritten
    assert live(plane) == {"web", "b-1"}
    asyncio.run(plan_then_apply(race=False))
    assert batch_allocatable(plane) is None and live(plane) == {"web"}
    status = plane.db.execute("SELECT status FROM nodes WHERE name = %s", (NODE,)).fetchone()
    assert status is not None and status[0]["nodeInfo"] == {}  # the rest of the status kept


def test_one_tick_over_many_nodes_reads_them_in_bulk(plane: Plane, monkeypatch: Any) -> None:
    """``reconcile_nodes``, what each chunk task of the tick runs: every node of the chunk is
    planned and applied as alone, a missing one is passed over, and a node whose lock another
    reconcile holds is left to it."""
    monkeypatch.setenv("DATABASE_URL", plane.url)
    monkeypatch.setenv("QM_BROKER_URL", plane.env["QM_BROKER_URL"])
    monkeypatch.setattr(shell, "_usage", None)  # the usage store of this test's Redis
    lends, lost, held = "n-lends", "n-no-samples", "n-held"
    add_node(plane, name=lends)
    add_pod(plane, "web", 2000, "3", lends, uid=WEB_UID)
    record(plane, 500, count=6, node=lends)
    add_node(plane, {"batchAllocatable": {"cpu": "6", "memory": "12Gi"}}, name=lost)
    add_pod(plane, "web-2", 2000, "3", lost)
    add_pod(plane, "b-1", 1, "1500m", lost)
    add_node(plane, {"batchAllocatable": {"cpu": "6", "memory": "12Gi"}}, name=held)
    add_pod(plane, "b-2", 1, "5", held)  # over allocatable: goes once the figure is gone

    rt = Runtime()
    try:
        with psycopg.connect(plane.url, autocommit=True) as other:
            other.execute(
                "SELECT pg_advisory_lock(hashtextextended(%s, 7))", (key_text("Node", "", held),)
            )
            again = rt.run(shell.reconcile_nodes(rt, [held, lends, "n-gone", lost], time.time()))
            assert again == {lost: AFTER_EVICTION_SECONDS}
            assert (batch_allocatable(plane, lends) or {}).get("cpu") == "6100m"
            assert batch_allocatable(plane, lost) is None and live(plane, lost) == {"web-2"}
            assert batch_allocatable(plane, held) == {"cpu": "6", "memory": "12Gi"}
            assert live(plane, held) == {"b-2"}, "a node another reconcile holds is left alone"
            # Released here, not by closing: a closed session's locks go only once its
            # backend has exited, which may be after the next tick.
            other.execute(
                "SELECT pg_advisory_unlock(hashtextextended(%s, 7))", (key_text("Node", "", held),)
            )
        # The other reconcile is done: the next tick takes the node.
        again = rt.run(shell.reconcile_nodes(rt, [held, lends, lost], time.time()))
        assert again == {held: AFTER_EVICTION_SECONDS}
        assert batch_allocatable(plane, held) is None and live(plane, held) == set()
        keys = [key_text("Node", "", n) for n in (held, lends, lost)]
        free = plane.db.execute(
            "SELECT bool_and(pg_try_advisory_lock(hashtextextended(k, 7))),"
            " bool_and(pg_advisory_unlock(hashtextextended(k, 7))) FROM unnest(%s::text[]) k",
            (keys,),
        ).fetchone()
        assert free == (True, True), "every lock the tick took is released"
    finally:
        if rt._pool is not None:
            rt.run(rt._pool.close())
        rt.loop.close()


def test_the_tick_queues_a_task_per_chunk_and_never_a_backlog(plane: Plane) -> None:
    """``reclaim_sweep`` with no worker to run its tasks: five nodes in chunks of two make three
    tasks; a second tick while they are still queued adds none."""
    for i in range(5):
        add_node(plane, name=f"n-{i}")
    env = {**plane.env, "QM_RECLAIM_CHUNK": "2", "QM_RECONCILE_QUEUES": "2"}
    code = "from workers.tasks import reclaim_sweep; print(reclaim_sweep(), reclaim_sweep())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "0"]
    broker = redis.Redis.from_url(plane.env["QM_BROKER_URL"])
    try:
        queued = [
            json.loads(m) for q in ("reconcile-0", "reconcile-1") for m in broker.lrange(q, 0, -1)
        ]
    finally:
        broker.close()
    chunks = sorted(json.loads(base64.b64decode(m["body"]))[0][1] for m in queued)
    assert chunks == [["n-0", "n-1"], ["n-2", "n-3"], ["n-4"]]
