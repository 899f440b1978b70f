"""The node proxy on real sockets: a fake discovery server speaking the wire protocol, real
backend TCP servers on 127.0.0.x, the proxy in host mode listening on a VIP in 127.100/16.

Each test waits for conditions (an ACK of a version, a counter), never for a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from agent.proxy.config import ProxyConfig
from agent.proxy.run import Proxy
from app.core.traffic import protocol

ROOT = Path(__file__).resolve().parents[2]
VIP = "127.100.9.9"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def until(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0, what: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.02)


# -- a fake discovery replica ----------------------------------------------------------------


@dataclass
class Client:
    hello: protocol.Subscription
    writer: asyncio.StreamWriter
    acks: list[int] = field(default_factory=list)
    nacks: list[dict[str, Any]] = field(default_factory=list)


class FakeDiscovery:
    """Sends a snapshot (or nothing, when the subscriber is current), then a delta per
    :meth:`publish`; records the subscriptions and the ACKs."""

    def __init__(self, resources: dict[str, Any], version: int = 10) -> None:
        self.resources, self.version, self.nonce = dict(resources), version, 0
        self.clients: list[Client] = []
        self.subscriptions: list[protocol.Subscription] = []
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self, port: int = 0) -> FakeDiscovery:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = protocol.parse_subscribe(protocol.decode(await reader.readline()))
        self.subscriptions.append(hello)
        client = Client(hello, writer)
        self.clients.append(client)
        self.nonce += 1
        if hello.version != self.version:
            writer.write(protocol.snapshot(self.version, self.nonce, self.resources))
        try:
            while line := await reader.readline():
                message = protocol.decode(line)
                if message["t"] == "ack":
                    client.acks.append(message["v"])
                else:
                    client.nacks.append(message)
        except ConnectionError:
            pass
        finally:
            self.clients.remove(client)
            writer.close()

    async def publish(self, changed: dict[str, Any], removed: tuple[str, ...] = ()) -> int:
        since, self.version = self.version, self.version + 1
        self.resources.update(changed)
        for key in removed:
            self.resources.pop(key, None)
        self.nonce += 1
        for client in self.clients:
            client.writer.write(
                protocol.delta(self.version, since, self.nonce, changed, list(removed))
            )
        return self.version

    def acked(self, version: int | None = None) -> bool:
        v = self.version if version is None else version
        return bool(self.clients) and all(v in c.acks for c in self.clients)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for client in list(self.clients):
            client.writer.transport.abort()
        await until(lambda: not self.clients, what="discovery connections closed")


# -- backends ---------------------------------------------------------------------------------


class Backend:
    """Answers each line with ``<name>:<line>``; at EOF it answers ``<name>:eof`` and closes
    (so a client's half-close must reach it through the proxy)."""

    def __init__(self, name: str, host: str) -> None:
        self.name, self.host = name, host
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.accepted = 0

    async def start(self) -> Backend:
        self.server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                writer.write(f"{self.name}:{line.decode().strip()}\n".encode())
                await writer.drain()
            writer.write(f"{self.name}:eof\n".encode())
            await writer.drain()
        writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def request(host: str, port: int, text: str = "hi") -> list[str]:
    """Send a line, half-close, read everything: the backend's answers."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    writer.write(f"{text}\n".encode())
    writer.write_eof()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data.decode().split()


async def who(port: int, host: str = VIP) -> str:
    answers = await request(host, port)
    assert len(answers) == 2 and answers[1].endswith(":eof"), answers
    return answers[0].split(":")[0]


def service(port: int, ip: str | None = VIP, kind: str = "ClusterIP") -> dict[str, Any]:
    return {"ip": ip, "type": kind, "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}


def endpoint(b: Backend, zone: str = "zone-a", ready: bool = True, term: bool = False) -> Any:
    return {"a": b.host, "z": zone, "n": "n", "r": ready, "s": ready or term, "t": term,
            "p": {"http": b.port}}  # fmt: skip


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
async def backends() -> AsyncIterator[Callable[..., Awaitable[Backend]]]:
    started: list[Backend] = []

    async def make(name: str, host: str) -> Backend:
        b = await Backend(name, host).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.close()


class Runner:
    """Starts proxies in the test's loop (``await runner(discovery ports, **settings)``) and
    stops them (one by :meth:`stop`, the rest after the test)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.running: dict[int, tuple[asyncio.Event, asyncio.Task[None]]] = {}

    async def __call__(self, discovery: list[int], **settings: Any) -> Proxy:
        config = ProxyConfig(
            node_name=settings.pop("node_name", "local-a"),
            zone=settings.pop("zone", "zone-a"),
            discovery=tuple(("127.0.0.1", p) for p in discovery),
            state_dir=settings.pop("state_dir", self.state_dir),
            discovery_timeout=settings.pop("discovery_timeout", 5.0),
            metrics_port=0,
            **settings,
        )
        proxy, stop = Proxy(config), asyncio.Event()
        task = asyncio.ensure_future(proxy.run(stop))
        self.running[id(proxy)] = (stop, task)
        await until(lambda: proxy.metrics_server is not None or task.done(), what="started")
        return proxy

    async def stop(self, proxy: Proxy) -> None:
        stop, task = self.running.pop(id(proxy))
        stop.set()
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def run_proxy(tmp_path: Path) -> AsyncIterator[Runner]:
    runner = Runner(tmp_path / "proxy")
    yield runner
    for stop, task in runner.running.values():
        stop.set()
        await asyncio.wait_for(task, 10)


async def listening(proxy: Proxy, n: int = 1) -> None:
    await until(lambda: len(proxy.forwarder.servers) >= n, what="listeners")


# -- the tests --------------------------------------------------------------------------------


async def test_connections_reach_ready_endpoints_in_the_proxy_s_zone(backends, run_proxy) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    b = await backends("b", "127.0.0.22")
    fake = await FakeDiscovery(
        {"s/ns/web": service(port), "e/ns/web/a": endpoint(a), "e/ns/web/b": endpoint(b, "zone-b")}
    ).start()
    proxy = await run_proxy([fake.port])
    await until(fake.acked, what="the snapshot acked")
    assert fake.subscriptions[0] == protocol.Subscription("local-a", "local-a", "zone-a", "all", 0)
    await listening(proxy)
    assert [await who(port) for _ in range(4)] == ["a"] * 4  # zone-a first

    v = await fake.publish({"e/ns/web/a": endpoint(a, ready=False)})
    await until(lambda: fake.acked(v), what="the delta acked")
    assert [await who(port) for _ in range(3)] == ["b"] * 3  # the other zone's ready one
    assert proxy.subscriber.acked == v

    await fake.publish({}, ("s/ns/web",))
    await until(lambda: not proxy.forwarder.servers, what="the listener closed")
    with pytest.raises(OSError):
        await request(VIP, port)
    await fake.stop()


async def test_a_refusing_endpoint_is_ejected_and_the_client_sees_no_failure(
    backends, run_proxy
) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    b = await backends("b", "127.0.0.22")
    fake = await FakeDiscovery(
        {"s/ns/web": service(port), "e/ns/web/a": endpoint(a), "e/ns/web/b": endpoint(b)}
    ).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    a.close()  # discovery still says ready
    assert [await who(port) for _ in range(6)] == ["b"] * 6
    ejections = proxy.metrics.ejections.labels("ns/web")
    assert ejections.value == 1  # once, then skipped while ejected
    assert proxy.metrics.connections.labels("ns/web", "retried").value == 1
    await fake.stop()


async def test_all_endpoints_unready_still_serves(backends, run_proxy) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    fake = await FakeDiscovery(
        {"s/ns/web": service(port), "e/ns/web/a": endpoint(a, ready=False)}
    ).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    assert await who(port) == "a"
    await fake.stop()


async def test_a_terminating_endpoint_keeps_its_connection_but_gets_no_new_ones(
    backends, run_proxy
) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    b = await backends("b", "127.0.0.22")
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/a": endpoint(a)}).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    reader, writer = await asyncio.open_connection(VIP, port)
    writer.write(b"one\n")
    assert await asyncio.wait_for(reader.readline(), 5) == b"a:one\n"

    v = await fake.publish(
        {"e/ns/web/a": endpoint(a, ready=False, term=True), "e/ns/web/b": endpoint(b)}
    )
    await until(lambda: fake.acked(v), what="the terminating version acked")
    assert [await who(port) for _ in range(3)] == ["b"] * 3
    writer.write(b"two\n")
    assert await asyncio.wait_for(reader.readline(), 5) == b"a:two\n"
    writer.write_eof()
    assert await asyncio.wait_for(reader.read(), 5) == b"a:eof\n"
    writer.close()

    v = await fake.publish({}, ("e/ns/web/b",))  # only the terminating one left
    await until(lambda: fake.acked(v))
    assert await who(port) == "a"
    await fake.stop()


class StreamBackend:
    """A backend on ``host`` and a free port, serving each connection with ``_serve``."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> Self:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class Resetter(StreamBackend):
    """Reads one line, then resets the connection (SO_LINGER 0, close)."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


class Echo(StreamBackend):
    """Sends back every byte it reads, waiting for its writes to drain; half-closes at EOF."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        await writer.drain()
        writer.close()


async def test_a_reset_on_one_side_is_a_reset_on_the_other(run_proxy: Runner) -> None:
    port = free_port(VIP)
    r = await Resetter("127.0.0.21").start()
    e = {"a": r.host, "z": "zone-a", "n": "n", "r": True, "s": True, "t": False,
         "p": {"http": r.port}}  # fmt: skip
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/r": e}).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    reader, writer = await asyncio.open_connection(VIP, port)
    writer.write(b"hi\n")
    with pytest.raises(ConnectionResetError):  # not a clean EOF: the client can tell
        await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await until(lambda: proxy.metrics.active.value == 0, what="the connection forgotten")
    assert r.server is not None
    r.server.close()
    await fake.stop()


async def test_bulk_both_ways_through_flow_control(run_proxy: Runner) -> None:
    """8 MiB each way with both directions open at once: the proxy's buffers fill, it pauses
    the reading side and resumes it, and every byte arrives in order."""
    port = free_port(VIP)
    echo = await Echo("127.0.0.21").start()
    e = {"a": echo.host, "z": "zone-a", "n": "n", "r": True, "s": True, "t": False,
         "p": {"http": echo.port}}  # fmt: skip
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/e": e}).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    payload = bytes(range(256)) * (8 * 4096)
    reader, writer = await asyncio.open_connection(VIP, port)

    async def send() -> None:
        for i in range(0, len(payload), 100_000):
            writer.write(payload[i : i + 100_000])
            await writer.drain()
        writer.write_eof()

    sender = asyncio.ensure_future(send())
    received = await asyncio.wait_for(reader.read(), 30)  # read() returns at the echo's EOF
    await sender
    writer.close()
    assert len(received) == len(payload) and received == payload
    await until(lambda: proxy.metrics.active.value == 0, what="the connection closed")
    assert echo.server is not None
    echo.server.close()
    await fake.stop()


async def test_stopping_the_proxy_resets_its_connections(
    backends: Callable[..., Awaitable[Backend]], run_proxy: Runner
) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/a": endpoint(a)}).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    reader, writer = await asyncio.open_connection(VIP, port)
    writer.write(b"one\n")
    assert await asyncio.wait_for(reader.readline(), 5) == b"a:one\n"
    assert proxy.metrics.active.value == 1
    await run_proxy.stop(proxy)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(), 5)
    writer.close()
    await fake.stop()


async def test_static_stability_without_discovery_and_across_a_restart(
    backends, run_proxy, tmp_path: Path
) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    dead = free_port()  # nothing listens there: the proxy must move on to the next replica
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/a": endpoint(a)}).start()
    state = tmp_path / "restart"
    proxy = await run_proxy([dead, fake.port], state_dir=state)
    await until(fake.acked, what="subscribed through the second address")
    await listening(proxy)
    await until(lambda: (state / "copy.json").exists(), what="the copy saved")

    await fake.stop()
    await until(lambda: not proxy.subscriber.connected, what="disconnected")
    assert await who(port) == "a"  # still forwards on the last copy

    await run_proxy.stop(proxy)  # a second proxy from the same state dir, discovery still down
    with pytest.raises(OSError):
        await request(VIP, port)
    again = await run_proxy([dead, fake.port], state_dir=state, node_name="local-a")
    await listening(again)
    assert again.subscriber.replica.version == 10
    assert await who(port) == "a"

    # discovery back on the same port: the restarted proxy resumes from the version it holds
    back = await FakeDiscovery(fake.resources, version=10).start(fake.port)
    await until(lambda: len(back.subscriptions) >= 1, what="resubscribed")
    assert back.subscriptions[0].version == 10
    await back.stop()


async def test_a_silent_discovery_connection_is_dropped(backends, run_proxy) -> None:
    fake = await FakeDiscovery({}).start()  # sends the snapshot, then never a ping
    proxy = await run_proxy([fake.port], discovery_timeout=0.3)
    await until(lambda: len(fake.subscriptions) >= 3, what="reconnections after silence")
    assert fake.subscriptions[-1].version == 10  # it kept its copy
    assert proxy.metrics.version_held.value == 10
    await fake.stop()


async def test_a_delta_out_of_order_is_refused(run_proxy) -> None:
    fake = await FakeDiscovery({}).start()
    await run_proxy([fake.port])
    await until(fake.acked)
    fake.clients[0].writer.write(protocol.delta(20, 15, 99, {}, []))
    await until(lambda: bool(fake.clients and fake.clients[0].nacks))
    assert fake.clients[0].nacks[0]["v"] == 10
    await fake.stop()


async def test_dns_over_udp_and_tcp(backends, run_proxy) -> None:
    a = await backends("a", "127.0.0.21")
    fake = await FakeDiscovery(
        {
            "s/default/web": service(80),
            "s/default/db": service(5432, ip=None),
            "e/default/db/db-0": endpoint(a),
        }
    ).start()
    proxy = await run_proxy([fake.port], dns=("127.0.0.1", 0))
    await until(fake.acked)
    assert proxy.dns is not None
    port = proxy.dns.port
    loop = asyncio.get_running_loop()

    def udp(name: str) -> DNSRecord:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(DNSRecord.question(name).pack(), ("127.0.0.1", port))
            return DNSRecord.parse(s.recv(4096))

    reply = await loop.run_in_executor(None, udp, "web.default.svc.cluster.local")
    assert [str(rr.rdata) for rr in reply.rr] == [VIP]
    assert reply.rr[0].ttl == 5
    reply = await loop.run_in_executor(None, udp, "db.default.svc")
    assert [str(rr.rdata) for rr in reply.rr] == ["127.0.0.21"]
    reply = await loop.run_in_executor(None, udp, "nope.default.svc")
    assert reply.header.rcode == RCODE.NXDOMAIN

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    query = DNSRecord.question("web.default.svc", "A").pack()
    writer.write(len(query).to_bytes(2, "big") + query)
    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), 5), "big")
    reply = DNSRecord.parse(await reader.readexactly(size))
    assert [(QTYPE.get(rr.rtype), str(rr.rdata)) for rr in reply.rr] == [("A", VIP)]
    writer.close()
    assert proxy.metrics.dns_queries.labels("NOERROR").value == 3
    await fake.stop()


async def test_metrics(backends, run_proxy) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/a": endpoint(a)}).start()
    proxy = await run_proxy([fake.port])
    await listening(proxy)
    await until(fake.acked)
    await who(port)
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.metrics_port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    text = (await asyncio.wait_for(reader.read(), 5)).decode()
    writer.close()
    for line in [
        'qm_proxy_connections_total{service="ns/web",result="forwarded"} 1',
        "qm_proxy_version_held 10",
        "qm_proxy_version_acked 10",
        "qm_proxy_discovery_connected 1",
        "qm_proxy_listeners 1",
    ]:
        assert line in text, text
    await fake.stop()


# -- edge mode --------------------------------------------------------------------------------


async def test_edge_mode_checks_health_itself_and_fails_open(backends, run_proxy) -> None:
    listen, port = "127.100.9.10", free_port("127.100.9.10")
    a = await backends("a", "127.0.0.21")
    b = await backends("b", "127.0.0.22")
    c = await backends("c", "127.0.0.23")
    fake = await FakeDiscovery(
        {
            "s/ns/web": service(port, ip="127.100.0.50", kind="LoadBalancer"),
            "e/ns/web/a": endpoint(a),
            "e/ns/web/b": endpoint(b),
            "e/ns/web/c": endpoint(c, ready=False),  # healthy by its checks, unready
        }
    ).start()
    proxy = await run_proxy(
        [fake.port], node_name="", edge=True, listen=listen, health_interval=0.1, fail_open=0.5
    )
    await until(fake.acked)
    hello = fake.subscriptions[0]
    assert (hello.ident, hello.scope) == (f"edge-{listen}", "exposed")
    await listening(proxy)
    assert proxy.forwarder.servers.keys() == {(listen, port)}
    await until(lambda: proxy.book.counts() == (3, 3), what="all three healthy")
    assert {await who(port, listen) for _ in range(6)} == {"a", "b"}  # ready ones preferred

    b.close()  # ready by discovery, unhealthy by the edge's checks after two failures
    await until(lambda: proxy.book.counts() == (2, 3), what="b unhealthy")
    assert {await who(port, listen) for _ in range(6)} == {"a"}
    assert proxy.metrics.ejections.labels("ns/web").value == 0  # the checks did it

    a.close()  # now only c passes: 1 of 3 < 0.5, fail open to all three
    await until(lambda: proxy.book.counts() == (1, 3), what="a unhealthy")
    assert {await who(port, listen) for _ in range(6)} == {"c"}  # a, b refuse: retried on c
    assert proxy.metrics.connections.labels("ns/web", "retried").value >= 1
    await fake.stop()


# -- the process ------------------------------------------------------------------------------


async def test_python_m_agent_proxy(backends, tmp_path: Path) -> None:
    port = free_port(VIP)
    a = await backends("a", "127.0.0.21")
    fake = await FakeDiscovery({"s/ns/web": service(port), "e/ns/web/a": endpoint(a)}).start()
    metrics_port = free_port()
    argv = [sys.executable, "-m", "agent.proxy", "--node-name", "local-a", "--zone", "zone-a",
            "--discovery", f"127.0.0.1:{fake.port}"]  # fmt: skip
    env = {"QM_PROXY_STATE_DIR": str(tmp_path / "p"), "QM_PROXY_METRICS_PORT": str(metrics_port)}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    try:
        await until(fake.acked, what="the process subscribed")

        async def forwards() -> bool:
            with contextlib.suppress(OSError):
                return await who(port) == "a"
            return False

        await until(forwards, what="the process forwarding")
        reader, writer = await asyncio.open_connection("127.0.0.1", metrics_port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        assert b"qm_proxy_listeners 1" in await asyncio.wait_for(reader.read(), 5)
        writer.close()
    finally:
        proc.terminate()
        _, err = await asyncio.get_running_loop().run_in_executor(None, proc.communicate)
    assert proc.returncode == 0, err.decode()
    assert re.search(rb"subscribed to discovery 127.0.0.1:\d+ at version 0", err), err.decode()
    await fake.stop()
