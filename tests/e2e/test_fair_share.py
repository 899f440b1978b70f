"""Fair shares hold across API servers: with two servers on one database, a flooding principal
holds at most the seats one server alone would give its priority level, its overflow waits in
a bounded queue and then gets 429 with Retry-After, and another principal of the same level is
served ahead of the flood's queue. When one server stops, the other takes the whole share."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.core.fairness import GLOBAL_DEFAULT, seat_limits
from app.devstack.apiserver import ApiServer
from bench.fairness.cluster import API, flow_figures, start_servers, tenant

SEATS = 78  # the level global-default gets 8 seats in all: 4 on each of two servers
QUEUE = 8
HOLD_S = 3.0  # a watch from a revision far ahead waits this long for it, holding its seat


@pytest.fixture
def servers(make_database: Callable[[str], str], tmp_path: Path) -> Iterator[list[ApiServer]]:
    url = make_database("fair")
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_SEATS": str(SEATS),
        "QM_API_QUEUE_LENGTH": str(QUEUE),
        "QM_API_QUEUE_WAIT_S": "30",
        "QM_API_HEARTBEAT_S": "0.3",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("QM_BROKER_URL", None)
    started = start_servers(env, token, 2, tmp_path)
    try:
        yield started
    finally:
        for s in started:
            s.stop()


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_a_flood_over_two_servers_gets_one_servers_share(servers: list[ApiServer]) -> None:
    a, b = servers
    assert seat_limits(SEATS, 1)[GLOBAL_DEFAULT] == 8
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=60, limits=limits) as api:
        db_url = a.env["DATABASE_URL"]
        admin = a.token
        api.base_url = httpx.URL(a.url)
        flood = await tenant(db_url, api, admin, "flooder", "flood")
        calm = await tenant(db_url, api, admin, "calm", "calm")

        async def both_see_two() -> bool:
            figs = [await flow_figures(api, s.url, "flooder") for s in servers]
            return all(f["servers"] == 2 and f["limit"] == 4 for f in figs)

        await until(both_see_two)
        rv = int((await api.get(f"{a.url}{API}/namespaces/flood/configmaps",
                                headers={"Authorization": f"Bearer {flood}"})).json()
                 ["metadata"]["resourceVersion"])  # fmt: skip

        def hold(server: ApiServer) -> Awaitable[httpx.Response]:
            """A request that holds a seat for HOLD_S: a watch from a revision far ahead."""
            return api.get(
                f"{server.url}{API}/namespaces/flood/configmaps",
                params={"watch": "1", "resourceVersion": str(rv + 10**6)},
                headers={"Authorization": f"Bearer {flood}"},
            )

        # 4 admitted + 8 queued + 3 refused at once, on each server.
        started = time.monotonic()
        tasks = [asyncio.ensure_future(hold(s)) for s in servers for _ in range(4 + QUEUE + 3)]

        async def flood_settled() -> bool:
            figs = [await flow_figures(api, s.url, "flooder") for s in servers]
            return all(f["queued"] == QUEUE and f["rejected"] == 3 for f in figs)

        await until(flood_settled, timeout=HOLD_S)
        figs = [await flow_figures(api, s.url, "flooder") for s in servers]
        # Across both servers the flooder holds what one server alone would give the level.
        assert sum(f["in_use"] for f in figs) == 8, figs
        refused = [t.result() for t in tasks if t.done()]
        assert len(refused) == 6 and all(r.status_code == 429 for r in refused), refused
        assert refused[0].headers["Retry-After"] == "1"
        body = refused[0].json()
        assert (body["kind"], body["reason"]) == ("Status", "TooManyRequests")

        # The other principal is served at the next free seat, ahead of the flood's queue.
        asked = time.monotonic()
        r = await api.get(
            f"{a.url}{API}/namespaces/calm/configmaps", headers={"Authorization": f"Bearer {calm}"}
        )
        served = time.monotonic()
        assert r.status_code == 200, r.text
        assert served - started < 2 * HOLD_S, "calm waited for the flood's queue"
        after = await flow_figures(api, a.url, "flooder")
        assert after["queued"] >= 1, "the flood's queue was drained before calm was served"
        assert served - asked < 2 * HOLD_S

        # One server stops: the other takes the whole share at its next heartbeat.
        b.stop()

        async def a_alone() -> bool:
            f = await flow_figures(api, a.url, "flooder")
            return f["servers"] == 1 and f["limit"] == 8

        await until(a_alone)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
