"""The node proxy inside a node's network namespace, for real: its VIP listener and DNS live in
local-a's namespace (not the host's), and it forwards over the bridge to a backend on
local-b's pod IP, while its discovery connection stays in the host namespace.

Needs root and ``ip netns`` (capability-gated); the network is the dev stack's plan with a tag
of this run's pid, removed afterwards.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator

import local_network
import pytest
from dnslib import DNSRecord
from test_proxy import VIP, Backend, FakeDiscovery, Runner, endpoint, run_proxy, service, until

from agent import netns
from app.devstack.network import NetworkPlan

__all__ = ["run_proxy"]  # the fixture, shared with test_proxy.py
PORT = 8080


@pytest.fixture(scope="module")
def plan() -> Iterator[NetworkPlan]:
    with local_network.built("x") as built:
        yield built


@pytest.fixture
async def backend_on_b(plan: NetworkPlan) -> AsyncIterator[Backend]:
    """A line server in local-b's namespace on its pod IP (sockets made there, served here)."""
    b = plan.node("b")
    backend = Backend("b", b.address)
    async with netns.NamespaceSockets(b.namespace) as sockets:
        sock = await sockets.listen(b.address, 0)
    backend.server = await asyncio.start_server(backend._serve, sock=sock)
    backend.port = sock.getsockname()[1]
    yield backend
    backend.close()


async def test_the_proxy_listens_and_answers_dns_inside_its_namespace(
    plan: NetworkPlan, backend_on_b: Backend, run_proxy: Runner
) -> None:
    a = plan.node("a")
    fake = await FakeDiscovery(
        {"s/ns/web": service(PORT), "e/ns/web/p": endpoint(backend_on_b, zone="b")}
    ).start()
    proxy = await run_proxy([fake.port], node_name=a.node_name, zone="a", netns=a.namespace,
                            dns=("127.0.0.53", 53))  # fmt: skip
    await until(fake.acked, what="subscribed from the host namespace")
    await until(lambda: len(proxy.forwarder.servers) == 1, what="the VIP listener")

    async with netns.NamespaceSockets(a.namespace) as inside:
        reader, writer = await inside.open_connection(VIP, PORT)
        writer.write(b"hi\n")
        writer.write_eof()
        assert (await asyncio.wait_for(reader.read(), 10)).split() == [b"b:hi", b"b:eof"]
        writer.close()

        query = DNSRecord.question("web.ns.svc.cluster.local")
        udp = await inside.listen("127.0.0.1", 0, kind=socket.SOCK_DGRAM)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendto(udp, query.pack(), ("127.0.0.53", 53))
            data, _ = await asyncio.wait_for(loop.sock_recvfrom(udp, 4096), 10)
        finally:
            udp.close()
        assert [str(rr.rdata) for rr in DNSRecord.parse(data).rr] == [VIP]

    with pytest.raises(OSError):  # nothing of it in the host namespace
        _, w = await asyncio.wait_for(asyncio.open_connection(VIP, PORT), 5)
        w.close()
    await fake.stop()
