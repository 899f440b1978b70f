"""The node proxy's DNS responder: service names to addresses, from the proxy's own table.

Pods resolve ``<service>.<namespace>.svc`` and ``<service>.<namespace>.svc.cluster.local``
through the proxy of their node (127.0.0.53:53 inside the node's network namespace). The
answers come from the same :class:`~agent.proxy.table.Table` the forwarder routes by, so a
query costs no call to the control plane and keeps working while discovery is away:

- a service with an ip: an ``A`` record of that ip (TTL 5 s);
- a headless service (no ip): an ``A`` record per ready endpoint address;
- a service with an external name: a ``CNAME`` to it;
- any other name under ``svc`` or ``cluster.local``: NXDOMAIN;
- a name outside the cluster domain: REFUSED (this is no recursive resolver).

:func:`answer` is pure (bytes in, bytes out, via ``dnslib``); :class:`DnsServer` serves it on
UDP and on TCP (two-byte length prefix) with sockets from ``agent.netns``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any, cast

from dnslib import CNAME, QTYPE, RCODE, RR, A, DNSError, DNSRecord

from agent.proxy.table import Service, Table

log = logging.getLogger(__name__)

TTL = 5
CLUSTER_DOMAIN = "cluster.local"
SERVICES = "svc"
TCP_IDLE = 10.0


def split_name(qname: str) -> tuple[str, str] | bool | None:
    """``(service, namespace)`` for a service name; ``None`` for another name inside the
    cluster domain; ``False`` for a name outside it."""
    labels = qname.lower().rstrip(".").split(".")
    suffix = CLUSTER_DOMAIN.split(".")
    inside = labels[-len(suffix) :] == suffix
    if inside:
        labels = labels[: -len(suffix)]
    if labels[-1:] != [SERVICES]:
        return None if inside else False
    rest = labels[:-1]
    if len(rest) != 2 or not all(rest):
        return None
    return rest[0], rest[1]


def records(service: Service, qtype: str) -> list[tuple[str, str]]:
    """(record type, data) of a service's answer to a query of ``qtype``."""
    if service.ext:
        return [("CNAME", service.ext)]
    if qtype not in ("A", "ANY"):
        return []
    if service.ip:
        return [("A", service.ip)]
    addresses = {e.address for e in service.endpoints if e.ready and not e.terminating}
    return [("A", a) for a in sorted(addresses)]


def answer(data: bytes, table: Table) -> tuple[bytes, str] | None:
    """The reply to one query and its response code, or None for a packet that is no query."""
    try:
        request = DNSRecord.parse(data)
    except (DNSError, struct.error, IndexError, ValueError):
        return None
    if request.header.qr or not request.questions:
        return None
    reply = request.reply()  # aa and ra set, the question copied
    question = request.q
    qname, qtype = str(question.qname), QTYPE.get(question.qtype, str(question.qtype))
    found = split_name(qname)
    if found is False:
        reply.header.aa = 0
        reply.header.rcode = RCODE.REFUSED
    elif found is None or not isinstance(found, tuple):
        reply.header.rcode = RCODE.NXDOMAIN
    else:
        service = table.by_name(found[1], found[0])
        if service is None:
            reply.header.rcode = RCODE.NXDOMAIN
        else:
            for rtype, value in records(service, qtype):
                rdata: Any = CNAME(value) if rtype == "CNAME" else A(value)
                reply.add_answer(RR(question.qname, getattr(QTYPE, rtype), rdata=rdata, ttl=TTL))
    return reply.pack(), RCODE.get(reply.header.rcode)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, respond: Callable[[bytes], bytes | None]) -> None:
        self.respond = respond
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        out = self.respond(data)
        if out is not None and self.transport is not None:
            self.transport.sendto(out, addr)


class DnsServer:
    """Answers on ``host:port`` over UDP and TCP until :meth:`close`."""

    def __init__(self, table: Table, count: Callable[[str], None] = lambda rcode: None) -> None:
        self.table, self.count = table, count
        self.udp: asyncio.DatagramTransport | None = None
        self.tcp: asyncio.base_events.Server | None = None

    def respond(self, data: bytes) -> bytes | None:
        result = answer(data, self.table)
        if result is None:
            self.count("malformed")
            return None
        self.count(result[1])
        return result[0]

    async def start(self, sockets: Any, host: str, port: int) -> None:
        """Listen with ``sockets`` (an ``agent.netns.NamespaceSockets``); port 0 picks one
        port free for both UDP and TCP."""
        for attempt in range(1 if port else 10):
            udp_sock = await sockets.listen(host, port, kind=socket.SOCK_DGRAM)
            chosen = udp_sock.getsockname()[1]
            try:
                tcp_sock = await sockets.listen(host, chosen)
            except OSError:
                udp_sock.close()
                if port or attempt == 9:
                    raise
                continue  # port 0: that port was free for UDP only; pick another
            break
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Udp(self.respond), sock=udp_sock
        )
        self.udp = transport
        self.tcp = await asyncio.start_server(self._tcp, sock=tcp_sock)

    @property
    def port(self) -> int:
        assert self.udp is not None
        return int(self.udp.get_extra_info("sockname")[1])

    async def _tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(2), TCP_IDLE)
                data = await asyncio.wait_for(reader.readexactly(int.from_bytes(head)), TCP_IDLE)
                out = self.respond(data)
                if out is None:
                    break
                writer.write(len(out).to_bytes(2, "big") + out)
                await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def close(self) -> None:
        if self.udp is not None:
            self.udp.close()
        if self.tcp is not None:
            self.tcp.close()
