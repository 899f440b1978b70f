"""The node proxy's TCP forwarder: listen on every service address, splice to an endpoint.

For every (service ip, TCP port) in the table (edge mode: every LoadBalancer port on the edge
address) the forwarder holds a listening socket, opened and closed as services come and go.
Each accepted connection gets an endpoint from the :class:`~agent.proxy.table.Picker`; an
endpoint that refuses or does not answer within ``connect_timeout`` is ejected on the proxy's
own judgement and the connection is tried on another (nothing has been sent yet, so that is
safe), up to ``tries`` endpoints. Then bytes flow both ways until both sides are done: an EOF
from one side shuts down the write side of the other (half-close), an error on either aborts
both.

Routing decides only where *new* connections go: a connection to an endpoint that becomes
terminating, or leaves the table, keeps going until one side closes it.

Sockets come from :class:`agent.netns.NamespaceSockets` (host mode or inside the node's
network namespace), so this module never chooses a namespace. ``agent.proxy.run`` wires it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Protocol

from agent.proxy import metrics as m
from agent.proxy.metrics import ProxyMetrics
from agent.proxy.table import Picker, Service, Table, Target

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 1.0
TRIES = 3
CHUNK = 64 * 1024
RETRY_LISTEN = 5.0  # seconds before listening again on an address that failed

Route = tuple[str, str]  # (service key, port name)


class Sockets(Protocol):
    """What the forwarder needs of :class:`agent.netns.NamespaceSockets`."""

    async def listen(self, host: str, port: int) -> socket.socket: ...

    async def connect(self, host: str, port: int) -> socket.socket: ...


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
        self._conns: set[asyncio.Task[None]] = set()

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
        for target in [t for t in self.routes if t not in self.servers]:
            try:
                sock = await self.listen_on.listen(*target)
                self.servers[target] = await asyncio.start_server(
                    functools.partial(self._accept, target), sock=sock
                )
            except OSError as exc:
                failed += 1
                log.warning("cannot listen on %s:%s: %s", *target, exc)
        self.metrics.listeners.set(len(self.servers))
        return failed

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        for task in self._conns:
            task.cancel()
        self.metrics.listeners.set(0)

    async def _accept(
        self, target: Target, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._forward(target, reader, writer)
        except asyncio.CancelledError:
            writer.transport.abort()
        finally:
            self._conns.discard(task)

    async def _forward(
        self, target: Target, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        service_key, port_name = self.routes.get(target) or ("", "")
        service = self.table.services.get(service_key)
        name = service_key.partition("/")[2] or f"{target[0]}:{target[1]}"
        upstream = await self._connect(service, port_name, name) if service else None
        if upstream is None:
            if service is None:
                self.metrics.connections.labels(name, m.NO_ENDPOINT).inc()
            writer.transport.abort()  # the client sees a reset, as with no listener
            return
        up_reader, up_writer = upstream
        self.metrics.active.inc()
        try:
            await splice(reader, writer, up_reader, up_writer)
        finally:
            self.metrics.active.dec()

    async def _connect(
        self, service: Service, port_name: str, name: str
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to an endpoint, ejecting the ones that refuse; None if none took it."""
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
                sock = await asyncio.wait_for(
                    self.connect_from.connect(*dest), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                tried.append(dest)
                seconds = self.picker.ejections.eject(dest, self.clock())
                self.metrics.ejections.labels(name).inc()
                log.info("%s: ejected %s:%s for %.0f s: %s", name, *dest, seconds, exc)
                continue
            self.picker.ejections.succeeded(dest, self.clock())
            result = m.RETRIED if tried else m.FORWARDED
            self.metrics.connections.labels(name, result).inc()
            return await asyncio.open_connection(sock=sock)
        self.metrics.connections.labels(name, m.FAILED).inc()
        return None


async def splice(
    a_reader: asyncio.StreamReader,
    a_writer: asyncio.StreamWriter,
    b_reader: asyncio.StreamReader,
    b_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both directions ended; half-close passes through."""
    pumps = [
        asyncio.ensure_future(_pump(a_reader, b_writer, a_writer)),
        asyncio.ensure_future(_pump(b_reader, a_writer, b_writer)),
    ]
    try:
        await asyncio.gather(*pumps)
    finally:
        for pump in pumps:
            pump.cancel()
        for w in (a_writer, b_writer):
            w.close()
        for w in (a_writer, b_writer):
            with contextlib.suppress(Exception):
                await w.wait_closed()


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()  # a reset on one side is a reset on the other
        source.transport.abort()
