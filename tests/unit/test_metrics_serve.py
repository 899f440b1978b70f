"""The scheduler's HTTP endpoint for /metrics and /healthz, over a real loopback socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from app.scheduler.metrics import Registry, serve


async def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)  # the server closes after one answer
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return status, headers, body


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[int, Registry, list[bool]]]:
    reg = Registry()
    reg.counter("qm_test_total", "Test.", ["k"]).labels("a").inc(3)
    health = [True]
    healthy: Callable[[], bool] = lambda: health[0]  # noqa: E731
    server = await serve("127.0.0.1", 0, reg.render, healthy)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, reg, health
    finally:
        server.close()
        await server.wait_closed()


async def test_metrics(endpoint: tuple[int, Registry, list[bool]]) -> None:
    port, reg, _ = endpoint
    status, headers, body = await _get(port, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    assert body.decode() == reg.render()
    assert 'qm_test_total{k="a"} 3' in body.decode()


async def test_metrics_ignores_a_query_string(endpoint: tuple[int, Registry, list[bool]]) -> None:
    status, _, _ = await _get(endpoint[0], "/metrics?name[]=x")
    assert status == 200


async def test_healthz_follows_the_callback(endpoint: tuple[int, Registry, list[bool]]) -> None:
    port, _, health = endpoint
    assert (await _get(port, "/healthz"))[::2] == (200, b"ok")
    health[0] = False
    status, _, _ = await _get(port, "/healthz")
    assert status == 503


async def test_other_paths_and_methods(endpoint: tuple[int, Registry, list[bool]]) -> None:
    port = endpoint[0]
    assert (await _get(port, "/"))[0] == 404
    assert (await _get(port, "/metricsx"))[0] == 404
    status, headers, _ = await _get(port, "/metrics", "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, headers, body = await _get(port, "/metrics", "HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


async def test_garbage_gets_400(endpoint: tuple[int, Registry, list[bool]]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint[0])
    writer.write(b"nonsense\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 400 ")


async def test_a_failing_render_is_500_and_the_server_keeps_going() -> None:
    def broken() -> str:
        raise RuntimeError("boom")

    server = await serve(port=0, render=broken)
    host, port = server.sockets[0].getsockname()[:2]
    try:
        assert host == "127.0.0.1"
        assert (await _get(port, "/metrics"))[0] == 500
        assert (await _get(port, "/healthz"))[0] == 200
    finally:
        server.close()
        await server.wait_closed()
