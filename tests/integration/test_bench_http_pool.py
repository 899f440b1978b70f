"""The hollow nodes' HTTP/1.1 pool against a small real server on a local socket: requests on
the wire as the shared client builds them, keep-alive reuse within the connection limit,
chunked and sized bodies, error bodies mapped by the shared client, and every way a request
can fail (refused, cut mid-answer, never answered, never given a connection, pool closed)
ending as ``Unreachable``, never a hang. The pool's deadlines run on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from agent.api import LEASE
from app.client import AsyncRestClient, QueueTimeout, Unreachable
from app.client.build import Request, encode
from app.core.errors import Conflict, StatusError
from bench.agents.http_pool import HttpError, HttpPool, parse_chunked, parse_head


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[Seen, asyncio.StreamWriter], Awaitable[bool]]  # False: close after


def sized(code: int, body: bytes, extra: str = "") -> bytes:
    head = f"HTTP/1.1 {code} X\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


async def echo(seen: Seen, w: asyncio.StreamWriter) -> bool:
    w.write(sized(200, json.dumps({"method": seen.method, "target": seen.target}).encode()))
    return True


@dataclass
class Server:
    answer: Answer = echo
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    open: int = 0
    port: int = 0

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        try:
            while True:
                head = (await r.readuntil(b"\r\n\r\n")).decode()
                line, *rest = head.split("\r\n")
                headers = {
                    k.lower(): v.strip() for k, _, v in (h.partition(":") for h in rest if h)
                }
                body = await r.readexactly(int(headers.get("content-length", "0")))
                method, target, _ = line.split(" ")
                self.seen.append(seen := Seen(method, target, headers, body))
                if self.answer is silent:
                    await r.read()  # never answers; returns when the client closes
                    break
                if not await self.answer(seen, w):
                    break
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            w.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    listener = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    srv.port = listener.sockets[0].getsockname()[1]
    yield srv
    listener.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listener.wait_closed(), 2)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(srv: Server, connections: int = 2, clock: Clock | None = None, **kw: float) -> HttpPool:
    return HttpPool(
        f"http://127.0.0.1:{srv.port}", {"Authorization": "Bearer t"}, connections,
        clock=clock or time.monotonic, **kw,
    )  # fmt: skip


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for a condition the event loop brings about (the socket's other end)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def get(target: str) -> Request:
    return Request("GET", target)


def put(target: str, body: object) -> Request:
    return Request("PUT", target, body=encode(body))


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 12", (200, 12, False)),
        (b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked", (201, None, False)),
        (b"HTTP/1.1 409 Conflict\r\ncontent-length: 3\r\nConnection: close", (409, 3, True)),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 9", (204, 0, False)),
        (b"HTTP/1.0 500 Oops", (500, 0, False)),
    ],
)
def test_response_heads(head: bytes, expected: tuple[int, int | None, bool]) -> None:
    assert parse_head(head) == expected


def test_a_head_that_is_not_http_is_refused() -> None:
    with pytest.raises(HttpError):
        parse_head(b"SSH-2.0-OpenSSH")


def test_chunked_bodies_complete_only_with_their_last_chunk() -> None:
    wire = b"xx4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\nNEXT"
    assert parse_chunked(wire, 2) == (b"abcdefg", len(wire) - 4)
    for cut in range(2, len(wire) - 4):
        assert parse_chunked(wire[:cut], 2) is None


async def test_requests_go_out_as_the_agent_sends_them_over_few_connections(
    server: Server,
) -> None:
    http = pool(server, connections=2)
    api = AsyncRestClient(http)
    body = {"metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"epoch": 0}}
    got = await asyncio.gather(*(api.replace(LEASE, "ns", body) for _ in range(20)))
    got.append(await api.get(LEASE, "ns", "n1"))
    await http.close()
    assert got[0] == {"method": "PUT", "target": "/apis/quaymaster.io/v1/namespaces/ns/leases/n1"}
    assert got[-1]["method"] == "GET" and api.codes == {"200": 21}
    assert server.connections == 2  # 21 requests, kept alive on the pool's two connections
    put = server.seen[0]
    assert json.loads(put.body) == body and put.headers["content-type"] == "application/json"
    assert put.headers["authorization"] == "Bearer t"
    assert put.headers["host"] == f"127.0.0.1:{server.port}"
    assert server.seen[-1].body == b"" and "content-type" not in server.seen[-1].headers


async def test_chunked_answers_and_status_bodies_map_to_the_agents_errors(server: Server) -> None:
    conflict = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "stale"}

    async def answer(seen: Seen, w: asyncio.StreamWriter) -> bool:
        if seen.method == "PUT":
            w.write(sized(409, json.dumps(conflict).encode()))
        elif seen.method == "POST":
            w.write(sized(502, b"bad gateway\n"))
        else:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            w.write(b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\n\r\n')
        return True

    server.answer = answer
    http = pool(server)
    api = AsyncRestClient(http)
    assert await api.send(get("/x")) == {"a": 1}
    with pytest.raises(Conflict, match="stale"):
        await api.send(put("/x", {}))
    with pytest.raises(StatusError, match="bad gateway") as err:
        await api.send(Request("POST", "/x", body=b"{}"))
    assert err.value.code == 502
    assert await api.send(get("/x")) == {"a": 1}  # the connection is still in step
    await http.close()
    assert api.codes == {"200": 2, "409": 1, "502": 1} and server.connections == 1


async def test_a_connection_cut_mid_answer_fails_that_request_only(server: Server) -> None:
    async def answer(seen: Seen, w: asyncio.StreamWriter) -> bool:
        if seen.target == "/cut":
            w.write(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"par')
            return False
        return await echo(seen, w)

    server.answer = answer
    http = pool(server, connections=1)
    api = AsyncRestClient(http)
    with pytest.raises(Unreachable):
        await api.send(get("/cut"))
    assert (await api.send(get("/after")))["target"] == "/after"
    await http.close()
    assert server.connections == 2 and api.codes == {"unreachable": 1, "200": 1}


async def test_refused_connections_fail_at_once() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    http = HttpPool(f"http://127.0.0.1:{port}", {}, 4)
    t = time.monotonic()
    results = await asyncio.gather(
        *(http.send("GET", "/") for _ in range(5)), return_exceptions=True
    )
    await http.close()
    assert all(isinstance(r, Unreachable) for r in results) and time.monotonic() - t < 2


async def silent(seen: Seen, w: asyncio.StreamWriter) -> bool:
    raise NotImplementedError  # the server sees this answer and waits for the client to leave


async def test_requests_without_a_connection_give_up_after_the_queue_timeout(
    server: Server,
) -> None:
    server.answer = silent
    clock = Clock()
    http = pool(server, connections=1, clock=clock, queue_timeout=0.3, timeout=5)
    api = AsyncRestClient(http)
    first = asyncio.ensure_future(api.send(get("/slow")))
    await until(lambda: bool(server.seen))
    queued = asyncio.ensure_future(api.send(get("/queued")))
    await until(lambda: bool(http._waiting))
    clock.now += 0.25
    http.sweep(clock.now)
    assert http._waiting, "not yet due: still waiting"
    clock.now += 0.1
    http.sweep(clock.now)
    with pytest.raises(QueueTimeout):
        await queued
    assert api.codes == {"queue-timeout": 1}
    assert not first.done() and [s.target for s in server.seen] == ["/slow"]
    await http.close()
    with pytest.raises(Unreachable):
        await first


async def test_an_answer_later_than_the_timeout_aborts_its_connection(server: Server) -> None:
    server.answer = silent
    clock = Clock()
    http = pool(server, connections=1, clock=clock, timeout=0.3)
    late = asyncio.ensure_future(http.send("GET", "/slow"))
    await until(lambda: bool(server.seen))
    clock.now += 0.25
    http.sweep(clock.now)
    assert http._busy, "not yet late: the connection is kept"
    clock.now += 0.1
    http.sweep(clock.now)
    with pytest.raises(Unreachable, match="no answer"):
        await late
    await until(lambda: server.open == 0)
    await http.close()


async def test_close_fails_everything_outstanding_and_drops_every_connection(
    server: Server,
) -> None:
    server.answer = silent
    http = pool(server, connections=3, timeout=60, queue_timeout=60)
    calls = [asyncio.ensure_future(http.send("GET", f"/{i}")) for i in range(10)]
    while len(server.seen) < 3:
        await asyncio.sleep(0.01)
    t = time.monotonic()
    await http.close()
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 1)
    assert time.monotonic() - t < 1 and all(isinstance(r, Unreachable) for r in results)
    await asyncio.sleep(0.1)
    assert server.open == 0
    with pytest.raises(Unreachable, match="closed"):
        await http.send("GET", "/late")


async def test_idle_connections_are_closed_before_the_server_would(server: Server) -> None:
    clock = Clock()
    http = pool(server, connections=1, clock=clock, idle_close=0.2)
    await http.send("GET", "/a")
    assert server.open == 1
    clock.now += 0.15
    http.sweep(clock.now)
    assert http._idle, "not idle long enough: kept"
    clock.now += 0.1
    http.sweep(clock.now)
    await until(lambda: server.open == 0)
    status, _ = await http.send("GET", "/b")
    await http.close()
    assert status == 200 and server.connections == 2


async def test_a_caller_that_gives_up_does_not_shift_answers_onto_others(server: Server) -> None:
    async def answer(seen: Seen, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.2 if seen.target == "/slow" else 0)
        return await echo(seen, w)

    server.answer = answer
    http = pool(server, connections=1)
    slow = asyncio.ensure_future(http.send("GET", "/slow"))
    await asyncio.sleep(0.05)
    slow.cancel()
    _, body = await http.send("GET", "/next")
    await http.close()
    assert json.loads(body)["target"] == "/next" and server.connections == 1


async def test_the_benchmark_load_stops_within_seconds_with_everything_in_flight(
    server: Server,
) -> None:
    from bench.agents.load import Load  # the benchmark's driver: its stop once hung for minutes

    server.answer = silent
    load = Load("t", 200, connections=4, renew_every=0.5, node_status_every=1e9)
    load.use_servers([f"http://127.0.0.1:{server.port}"])
    load.start()
    while len(server.seen) < 4:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # renewals pile up behind the four silent connections
    assert len(load._tasks) > 50
    t = time.monotonic()
    assert await load.stop() == 0
    assert time.monotonic() - t < 2 and not load._tasks
    await asyncio.sleep(0.1)
    assert server.open == 0
