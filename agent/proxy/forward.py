"""The node proxy's TCP forwarder: listen on every service address, splice to an endpoint.

For every (service ip, TCP port) in the table (edge mode: every LoadBalancer port on the edge
address) the forwarder holds a listening socket, opened and closed as services come and go.
Each accepted connection gets an endpoint from the :class:`~agent.proxy.table.Picker`; an
endpoint that refuses or does not answer within ``connect_timeout`` is ejected on the proxy's
own judgement and the connection is tried on another (nothing has been sent yet, so that is
safe), up to ``tries`` endpoints. Then bytes flow both ways until both sides are done: an EOF
from one side shuts down the write side of the other (half-close), an error or a reset on
either side resets both.

Routing decides only where *new* connections go: a connection to an endpoint that becomes
terminating, or leaves the table, keeps going until one side closes it.

The data path is a pair of :class:`_End` protocols, one per socket, each writing what it
reads straight into the other's transport: no streams and no task per direction, only one
task per connection while the endpoint is chosen and connected (ADR 0040, "Data path").
Flow control is the transports' own: when one end's write buffer passes its high-water mark
the other end stops reading until it drains.

Sockets come from :class:`agent.netns.NamespaceSockets` (host mode or inside the node's
network namespace), so this module never chooses a namespace. ``agent.proxy.run`` wires it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import struct
import time
from collections.abc import Callable
from typing import Protocol, cast

from agent.proxy import metrics as m
from agent.proxy.metrics import ProxyMetrics
from agent.proxy.table import Picker, Service, Table, Target

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 1.0
TRIES = 3
RETRY_LISTEN = 5.0  # seconds before listening again on an address that failed
BACKLOG = 1024  # connections the kernel queues for a listener before refusing
_LINGER_0 = struct.pack("ii", 1, 0)  # SO_LINGER on with 0 s: close(2) sends a reset

Route = tuple[str, str]  # (service key, port name)


class Sockets(Protocol):
    """What the forwarder needs of :class:`agent.netns.NamespaceSockets`."""

    async def listen(self, host: str, port: int) -> socket.socket: ...

    async def connect(self, host: str, port: int) -> socket.socket: ...


def reset(transport: asyncio.Transport) -> None:
    """Close ``transport`` at once with a TCP reset (RST), dropping anything unsent."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_0)
    transport.abort()


class _End(asyncio.Protocol):
    """One socket of a forwarded connection. Until :func:`join` pairs it with the other end
    it holds what it reads (and stops reading); after, what it reads is written to the
    other end's transport, its EOF becomes the other end's ``write_eof``, and its loss
    closes the other end (resets it when the loss was an error or a reset)."""

    transport: asyncio.Transport

    def __init__(self, forwarder: Forwarder, target: Target | None = None) -> None:
        self.forwarder = forwarder
        self.target = target  # the client end: the service address it was accepted on
        self.peer: _End | None = None
        self.held: list[bytes] = []
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.target is not None:
            self.forwarder.accepted(self, self.target)

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.transport.write(data)
        else:
            self.held.append(data)
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if not self.eof:  # a reader resumed after its EOF reports it again
            self.eof = True
            if self.peer is not None:
                _pass_eof(self, self.peer)
        return True  # keep the socket open for what the other side still sends

    def pause_writing(self) -> None:
        if self.peer is not None and not self.peer.eof:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and not self.peer.eof:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        peer = self.peer
        if peer is None:
            return  # not joined yet: join() or the forwarder's close sees ``lost``
        if not peer.lost:
            if exc is None:
                peer.transport.close()
            else:
                reset(peer.transport)
        else:
            self.forwarder.ended(self, peer)


def _pass_eof(end: _End, peer: _End) -> None:
    """``end`` read its EOF: half-close towards ``peer``, or close both when both are done."""
    if peer.eof:
        end.transport.close()
        peer.transport.close()
    elif not peer.transport.is_closing():
        peer.transport.write_eof()


def join(a: _End, b: _End) -> bool:
    """Pair two connected ends: what each held goes to the other, and reading resumes.
    False (both reset) when either was lost meanwhile."""
    if a.lost or b.lost:
        for end in (a, b):
            if not end.lost:
                reset(end.transport)
        return False
    a.peer, b.peer = b, a
    for end, other in ((a, b), (b, a)):
        if end.held:
            other.transport.writelines(end.held)
            end.held = []
            if not end.eof:
                end.transport.resume_reading()
    for end, other in ((a, b), (b, a)):
        if end.eof and not end.transport.is_closing():
            _pass_eof(end, other)
    return True


class Forwarder:
    def __init__(
        self,
        table: Table,
        picker: Picker,
        listen_on: Sockets,
        connect_from: Sockets,
        metrics: ProxyMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        connect_timeout: float = CONNECT_TIMEOUT,
        tries: int = TRIES,
    ) -> None:
        self.table, self.picker = table, picker
        self.listen_on, self.connect_from = listen_on, connect_from
        self.metrics, self.clock = metrics, clock
        self.connect_timeout, self.tries = connect_timeout, tries
        self.routes: dict[Target, Route] = {}
        self.servers: dict[Target, asyncio.base_events.Server] = {}
        self._wanted = asyncio.Event()
        self._opening: set[asyncio.Task[None]] = set()  # choosing and connecting an endpoint
        self._joined: set[_End] = set()  # the client ends of forwarded connections

    def want(self, routes: dict[Target, Route]) -> None:
        """Route new connections by ``routes`` from now on; listeners follow in :meth:`run`."""
        self.routes = routes
        self._wanted.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the listeners in step with the routes until ``stop``; then close everything."""
        try:
            while not stop.is_set():
                self._wanted.clear()
                failed = await self.sync()
                wanted = asyncio.ensure_future(self._wanted.wait())
                stopped = asyncio.ensure_future(stop.wait())
                await asyncio.wait(
                    (wanted, stopped),
                    timeout=RETRY_LISTEN if failed else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                wanted.cancel()
                stopped.cancel()
        finally:
            self.close()

    async def sync(self) -> int:
        """Open the listeners routes need and close the others; returns how many failed."""
        for target in [t for t in self.servers if t not in self.routes]:
            self.servers.pop(target).close()  # open connections carry on
        failed = 0
        loop = asyncio.get_running_loop()
        for target in [t for t in self.routes if t not in self.servers]:
            try:
                sock = await self.listen_on.listen(*target)
                self.servers[target] = await loop.create_server(
                    functools.partial(_End, self, target), sock=sock, backlog=BACKLOG
                )
            except OSError as exc:
                failed += 1
                log.warning("cannot listen on %s:%s: %s", *target, exc)
        self.metrics.listeners.set(len(self.servers))
        return failed

    def close(self) -> None:
        """Stop listening and reset every connection."""
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        for task in self._opening:
            task.cancel()
        for end in list(self._joined):
            for e in (end, end.peer):
                if e is not None and not e.lost:
                    reset(e.transport)
        self.metrics.listeners.set(0)

    def accepted(self, client: _End, target: Target) -> None:
        """A client connected to ``target``: choose and connect its endpoint in a task."""
        task = asyncio.get_running_loop().create_task(self._open(client, target))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    def ended(self, a: _End, b: _End) -> None:
        """Both sockets of a forwarded connection are closed."""
        self._joined.discard(a)
        self._joined.discard(b)
        self.metrics.active.dec()

    async def _open(self, client: _End, target: Target) -> None:
        sock: socket.socket | None = None
        try:
            service_key, port_name = self.routes.get(target) or ("", "")
            service = self.table.services.get(service_key)
            name = service_key.partition("/")[2] or f"{target[0]}:{target[1]}"
            if service is None:
                self.metrics.connections.labels(name, m.NO_ENDPOINT).inc()
            else:
                sock = await self._connect(service, port_name, name)
            if sock is None:
                reset(client.transport)  # the client sees a reset, as with no listener
                return
            upstream = _End(self)
            await asyncio.get_running_loop().create_connection(lambda: upstream, sock=sock)
        except BaseException:
            if sock is not None:
                sock.close()
            if not client.lost:
                reset(client.transport)
            raise
        if join(client, upstream):
            self._joined.add(client)
            self.metrics.active.inc()

    async def _connect(self, service: Service, port_name: str, name: str) -> socket.socket | None:
        """A socket connected to an endpoint, ejecting the ones that refuse; None if none took
        it (counted)."""
        tried: list[Target] = []
        while len(tried) < self.tries:
            picked = self.picker.pick(service, port_name, self.clock(), tried)
            if picked is None:
                if not tried:
                    self.metrics.connections.labels(name, m.NO_ENDPOINT).inc()
                    return None
                break
            _, dest = picked
            try:
                async with asyncio.timeout(self.connect_timeout):
                    sock = await self.connect_from.connect(*dest)
            except (OSError, TimeoutError) as exc:
                tried.append(dest)
                seconds = self.picker.ejections.eject(dest, self.clock())
                self.metrics.ejections.labels(name).inc()
                log.info("%s: ejected %s:%s for %.0f s: %r", name, *dest, seconds, exc)
                continue
            self.picker.ejections.succeeded(dest, self.clock())
            result = m.RETRIED if tried else m.FORWARDED
            self.metrics.connections.labels(name, result).inc()
            return sock
        self.metrics.connections.labels(name, m.FAILED).inc()
        return None
