"""Hollow nodes against a real API server: two hundred simulated agents register, renew
their leases on the evenly spread schedule the benchmark uses, and the node lifecycle
controller's own bookkeeping (``track`` over the lease rows' versions, read as its loop reads
them) counts every node as renewed; pods bound to hollow nodes run on the ``sim`` runtime and
reach Running and then Ready in two status writes each. Everything the test creates is
deleted through the API at the end (the database is shared by the session). The nodes talk
through :class:`bench.agents.http_pool.HttpPool`, the benchmark's client."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import psycopg
import pytest

from agent.api import LEASE, NAMESPACE, NODE, POD
from agent.lease import LEASE_NAMESPACE
from agent.loop import RestPodApi
from agent.runtime.sim import SimRuntime
from app.client import AsyncRestClient, build
from app.core.controllers.nodelifecycle import track
from app.core.kinds import Kind
from app.devstack.apiserver import ApiServer
from bench.agents.hollow import HollowNode, due_slots, hollow_nodes, hollow_pod, pod_worker
from bench.agents.http_pool import HttpPool

Obj = dict[str, Any]
NODES = 200
PODS = 20
PERIOD = 2.5  # every node renews twice in a 5 s window (80 renewals/s)


async def bounded(calls: list[Callable[[], Awaitable[Any]]], width: int = 50) -> None:
    gate = asyncio.Semaphore(width)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


def lease_versions(url: str, names: list[str]) -> dict[str, int]:
    """The lease rows' versions, read as the node lifecycle loop reads them."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT name, row_version FROM leases WHERE namespace = %s AND name = ANY(%s)",
            (LEASE_NAMESPACE, names),
        ).fetchall()
    return {str(name): int(version) for name, version in rows}


async def renew_for(nodes: list[HollowNode], seconds: float) -> list[float]:
    """Renew every node each ``PERIOD`` on the spread schedule; the lateness of each call
    (not asserted: the test shares two cores with its API server and PostgreSQL)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    late: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def renew(due: float, node: HollowNode) -> None:
        await node.renew(time.time())
        late.append(loop.time() - due)

    t = start
    while t < start + seconds:
        now = loop.time()
        for due, i in due_slots(len(nodes), PERIOD, start, t, min(now, start + seconds)):
            task = asyncio.create_task(renew(due, nodes[i]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        t = max(t, min(now, start + seconds))
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    return late


@pytest.mark.slow  # 10 s on the pool (17-37 s on httpx) on the shared 2-core machine
async def test_hollow_nodes_renew_their_leases_and_run_pods(
    api_server: ApiServer, pg_url: str
) -> None:
    prefix = f"hollow-{secrets.token_hex(3)}"
    headers = {"Authorization": f"Bearer {api_server.token}"}
    http = HttpPool(api_server.url, headers, 50)  # the benchmark's own client
    try:
        api = AsyncRestClient(http)
        nodes = hollow_nodes(api, prefix, NODES)
        names = [n.name for n in nodes]
        ns = prefix
        await api.create(NAMESPACE, None, {"metadata": {"name": ns}})
        try:
            await bounded([partial(n.register, time.time()) for n in nodes])
            node = await api.get(NODE, None, names[7])
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready[0]["status"] == "True" and node["status"]["allocatable"]["cpu"]
            assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"

            seen = track({}, lease_versions(pg_url, names), 0.0)
            assert len(seen) == NODES and not any(s.renewed for s in seen.values())
            late = await renew_for(nodes, 2 * PERIOD)
            seen = track(seen, lease_versions(pg_url, names), 1.0)
            assert all(s.renewed for s in seen.values())
            assert len(late) == 2 * NODES and all(n.renewals == 2 for n in nodes)
            lease = await api.get(LEASE, LEASE_NAMESPACE, names[0])
            assert lease["spec"]["holderIdentity"] == names[0] and lease["spec"]["epoch"] == 0

            pods = [await api.create(POD, ns, hollow_pod(f"p{i}", names[i])) for i in range(PODS)]
            runtime = SimRuntime()
            workers = [pod_worker(p, runtime, RestPodApi(api), "10.0.0.1") for p in pods]
            tasks = [asyncio.create_task(w.run()) for w in workers]
            deadline = time.monotonic() + 15
            while any(w.writes < 2 for w in workers) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            for w in workers:
                w.request_stop(confirm=False)  # stop the sim containers; no API write
            await asyncio.wait_for(asyncio.gather(*tasks), 10)
            assert [w.writes for w in workers] == [2] * PODS
            for p in pods:
                got = await api.get(POD, ns, p["metadata"]["name"])
                conditions = {c["type"]: c["status"] for c in got["status"]["conditions"]}
                assert got["status"]["phase"] == "Running" and conditions["Ready"] == "True"
            # 404: registration's "is my node there?" and the lease namespace the first
            # concurrent registrations all miss; 409: their race to create it.
            errors = {code: n for code, n in api.codes.items() if code not in ("200", "201")}
            assert set(errors) <= {"404", "409"}, errors
            assert NODES <= errors["404"] <= NODES + 50 and errors.get("409", 0) < 50, errors
        finally:
            await cleanup(api, ns, names)
    finally:
        await http.close()
    assert http.sent >= 3 * NODES and not http._busy and not http._idle


async def cleanup(api: AsyncRestClient, ns: str, names: list[str]) -> None:
    async def drop(kind: Kind, namespace: str | None, name: str, grace: int | None = None) -> None:
        with contextlib.suppress(Exception):  # cleanup goes on past what is already gone
            await api.delete(kind, namespace, name, grace_seconds=grace)

    listed = await api.send(build.list_page(POD, ns))
    pods = [p["metadata"]["name"] for p in listed.get("items") or []]
    await bounded([partial(drop, POD, ns, name, 0) for name in pods])
    await bounded([partial(drop, LEASE, LEASE_NAMESPACE, n) for n in names])
    await bounded([partial(drop, NODE, None, n) for n in names])
    await drop(NAMESPACE, None, ns)
