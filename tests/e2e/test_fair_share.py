"""One user's requests in flight are capped per server: beyond the cap the answer is 429 with
Retry-After, and other users are not affected."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import psycopg

from app.devstack.apiserver import ApiServer
from app.devstack.supervise import free_port
from app.store.tokens import digest


async def test_a_flooding_user_gets_429_and_others_do_not(api_server, pg_url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    other = secrets.token_urlsafe(16)
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(
            "INSERT INTO qm_tokens (username, token_sha256) VALUES ('calm', %s)", (digest(other),)
        )
    port = free_port()
    env = {**api_server.env, "QM_MAX_INFLIGHT_PER_USER": "2", "QM_API_PORT": str(port)}
    server = ApiServer(port, api_server.token, env, tmp_path / "api.log", cwd=api_server.cwd)
    server.start(timeout=30)
    try:
        ns = f"fair-{secrets.token_hex(3)}"
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as c:
            flood = {"Authorization": f"Bearer {api_server.token}"}
            r = await c.post(
                "/apis/quaymaster.io/v1/namespaces", headers=flood, json={"metadata": {"name": ns}}
            )
            assert r.status_code == 201, r.text

            def create(i: int) -> object:
                return c.post(
                    f"/apis/quaymaster.io/v1/namespaces/{ns}/configmaps",
                    headers=flood,
                    json={"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}},
                )

            results = await asyncio.gather(*(create(i) for i in range(40)))
            codes = [r.status_code for r in results]  # type: ignore[attr-defined]
            assert 429 in codes and 201 in codes
            limited = next(r for r in results if r.status_code == 429)  # type: ignore[attr-defined]
            assert limited.headers["Retry-After"] == "1"
            body = limited.json()
            assert body["kind"] == "Status" and body["reason"] == "TooManyRequests"
            calm = await c.get(
                f"/apis/quaymaster.io/v1/namespaces/{ns}/configmaps",
                headers={"Authorization": f"Bearer {other}"},
            )
            assert calm.status_code == 200
            created = {i["metadata"]["name"] for i in calm.json()["items"]}
            assert len(created) == codes.count(201), "a refused request wrote nothing"
    finally:
        server.stop()
