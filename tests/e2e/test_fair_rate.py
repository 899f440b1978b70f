"""The per-flow rate across two API servers (ADR 0059): a principal alone runs as fast as its
seats allow; while another principal uses the server it is held to its level's seats per
second there, and the other principal is not held up behind it."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.devstack.apiserver import ApiServer
from bench.fairness.cluster import API, parse_metrics, start_servers, tenant

SEATS = 78  # global-default: 4 seats on each of two servers, so 4 seats/s, a bucket of 8
RATE, BUCKET = 4, 8


@pytest.fixture
def servers(make_database: Callable[[str], str], tmp_path: Path) -> Iterator[list[ApiServer]]:
    url = make_database("fairrate")
    token = secrets.token_urlsafe(24)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_SEATS": str(SEATS),
        "QM_API_QUEUE_WAIT_S": "30",
        "QM_API_HEARTBEAT_S": "0.3",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("QM_BROKER_URL", None)
    env.pop("QM_API_FLOW_RATE", None)  # the default: one seat per second per seat
    started = start_servers(env, token, 2, tmp_path)
    try:
        yield started
    finally:
        for s in started:
            s.stop()
        # A server's traceback, shown with a failure (pytest prints captured output then).
        for log in sorted(tmp_path.glob("*.log")):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                print(f"--- {log.name}\n{text[max(0, text.index('Traceback') - 2000) :][:8000]}")


async def gets(api: httpx.AsyncClient, url: str, token: str, n: int, width: int = 4) -> float:
    """``n`` reads of one ConfigMap, ``width`` at a time; returns the seconds they took."""
    sem = asyncio.Semaphore(width)
    auth = {"Authorization": f"Bearer {token}"}

    async def one() -> None:
        async with sem:
            r = await api.get(f"{url}{API}/namespaces/flood/configmaps/c", headers=auth)
            assert r.status_code == 200, r.text

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.monotonic() - t0


async def test_a_flow_is_held_to_its_rate_only_while_another_uses_the_server(
    servers: list[ApiServer],
) -> None:
    a = servers[0]
    async with httpx.AsyncClient(timeout=60) as api:
        api.base_url = httpx.URL(a.url)
        flood = await tenant(a.env["DATABASE_URL"], api, a.token, "flooder", "flood")
        calm = await tenant(a.env["DATABASE_URL"], api, a.token, "calm", "calm")
        admin = {"Authorization": f"Bearer {a.token}"}
        r = await api.post(f"{API}/namespaces/flood/configmaps", headers=admin,
                           json={"metadata": {"name": "c"}})  # fmt: skip
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 20
        while True:  # both servers count two: each has half the level, so half the rate
            m = [parse_metrics((await api.get(f"{s.url}/metrics")).text) for s in servers]
            key = ("qm_apf_level_flow_rate_limit", 'level="global-default"')
            if all(x.get(key) == RATE for x in m):
                break
            assert time.monotonic() < deadline, m
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # the admin's requests are more than a second old

        # Alone: 40 reads, far past the bucket and the rate, run at the seats' pace.
        alone = await gets(api, a.url, flood, 40)
        assert BUCKET + RATE * alone < 40, alone

        # With company: calm reads every 0.1 s; the flooder's 20 reads take the rate's time.
        waits: list[float] = []
        stop = asyncio.Event()

        async def keep_company() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                r = await api.get(f"{API}/namespaces/calm/configmaps",
                                  headers={"Authorization": f"Bearer {calm}"})  # fmt: skip
                assert r.status_code == 200, r.text
                waits.append(time.monotonic() - t0)
                await asyncio.sleep(0.1)

        company = asyncio.create_task(keep_company())
        await asyncio.sleep(0.3)
        held = await gets(api, a.url, flood, 20)
        stop.set()
        await company
        assert held >= (20 - BUCKET) / RATE * 0.9, held
        # calm was served at once throughout, ahead of the flooder's waiting reads.
        assert max(waits) < 1.0, waits
