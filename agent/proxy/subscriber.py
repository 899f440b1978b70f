"""The node proxy's discovery connection and the copy it keeps on disk (ADR 0040).

:class:`Subscriber` holds one TCP connection to one discovery replica at a time (in the host
namespace), says which version it holds, applies every snapshot and delta to its
:class:`~app.core.traffic.protocol.Replica`, lets the proxy update its table, and only then
sends the ACK: an acknowledged version is one this proxy already routes by, which is what the
agent's drain waits for. A connection that fails, or stays silent for ``silence`` seconds
(about three ping periods), is dropped and the next replica in the list is tried after a
jittered backoff capped at a few seconds, forever; meanwhile the proxy keeps forwarding on
the copy it has (static stability).

:class:`CopyFile` writes that copy to ``<state dir>/copy.json`` atomically, at most once a
second, and reads it back at start, so a proxy restarted while discovery is down still
forwards. ``agent.proxy.run`` wires both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from app.core.traffic import protocol
from app.core.traffic.protocol import Applied, Replica
from app.process import Wait, wait_or_stop

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.1
BACKOFF_CAP = 3.0
CONNECT_TIMEOUT = 3.0
SAVE_EVERY = 1.0


class CopyFile:
    """``copy.json``: the replica's version and resources, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Replica:
        """The saved copy, or an empty one when there is none or it cannot be read."""
        try:
            data = msgspec.json.decode(self.path.read_bytes())
            version, resources = data["version"], data["resources"]
            if isinstance(version, int) and isinstance(resources, dict):
                return Replica(version, resources)
        except FileNotFoundError:
            pass
        except Exception as exc:  # a torn or foreign file: start empty, discovery refills
            log.warning("ignoring unreadable %s: %s", self.path, exc)
        return Replica()

    def encode(self, replica: Replica) -> bytes:
        return msgspec.json.encode({"version": replica.version, "resources": replica.resources})

    def write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class Subscriber:
    """Keeps ``replica`` in step with discovery; ``on_change`` runs before each ACK."""

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        ident: str,
        replica: Replica,
        on_change: Callable[[Applied], None],
        *,
        node: str = "",
        zone: str = "",
        scope: str = "all",
        silence: float = 15.0,
        rng: random.Random | None = None,
        wait: Wait = wait_or_stop,
    ) -> None:
        self.addresses = list(addresses)
        self.ident, self.node, self.zone, self.scope = ident, node, zone, scope
        self.replica, self.on_change = replica, on_change
        self.silence = silence
        self.rng = rng or random.Random()
        self.wait = wait
        self.connected = False
        self.acked = 0  # the last version acknowledged
        self.changed = asyncio.Event()  # set on every applied change (for the saver)
        self._next = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Subscribe, reconnecting forever, until ``stop``."""
        delay = BACKOFF_FIRST
        while not stop.is_set():
            host, port = self.addresses[self._next % len(self.addresses)]
            progressed = False
            try:
                progressed = await self._session(host, port, stop)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                log.info("discovery %s:%s: %s", host, port, exc or type(exc).__name__)
            except Exception:  # a bug must not end the subscription: keep the copy, retry
                log.exception("discovery %s:%s: unexpected error", host, port)
            finally:
                self.connected = False
            if stop.is_set():
                return
            self._next += 1  # the next replica in the list
            delay = BACKOFF_FIRST if progressed else min(BACKOFF_CAP, delay * 2)
            await self.wait(stop, delay * (0.5 + self.rng.random() / 2))

    async def _session(self, host: str, port: int, stop: asyncio.Event) -> bool:
        """One connection; True if it applied at least one message."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=protocol.MAX_LINE), CONNECT_TIMEOUT
        )
        progressed = False
        try:
            writer.write(
                protocol.subscribe(
                    self.ident, self.node, self.zone, self.scope, self.replica.version
                )
            )
            await writer.drain()
            self.connected = True
            log.info(
                "subscribed to discovery %s:%s at version %d", host, port, self.replica.version
            )
            stopped = asyncio.ensure_future(stop.wait())
            try:
                while True:
                    line = await self._line(reader, stopped)
                    if line is None:
                        return progressed
                    if not line:
                        raise ConnectionError("discovery closed the connection")
                    reply = self._apply(protocol.decode(line))
                    if reply is not None:
                        progressed = True
                        writer.write(reply)
                        await writer.drain()
            finally:
                stopped.cancel()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _line(
        self, reader: asyncio.StreamReader, stopped: asyncio.Future[Any]
    ) -> bytes | None:
        """The next line; None once stopped; ``TimeoutError`` after ``silence`` seconds."""
        read = asyncio.ensure_future(reader.readline())
        done, _ = await asyncio.wait((read, stopped), timeout=self.silence,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        if read in done:
            return read.result()
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await read
        if stopped in done:
            return None
        raise TimeoutError(f"no message from discovery in {self.silence:g} s")

    def _apply(self, message: dict[str, Any]) -> bytes | None:
        applied = self.replica.apply(message)
        if applied.changed or applied.reset:
            self.on_change(applied)
            self.changed.set()
        if applied.reply is not None and message.get("t") in ("snapshot", "delta"):
            reply = protocol.decode(applied.reply)
            if reply.get("t") == "ack":
                self.acked = int(reply["v"])
            else:
                log.warning("refused a %s from discovery: %s", message["t"], reply.get("error"))
        return applied.reply


async def keep_saved(
    copy: CopyFile, subscriber: Subscriber, stop: asyncio.Event, wait: Wait = wait_or_stop
) -> None:
    """Write the replica whenever it changed, at most once every ``SAVE_EVERY`` seconds, and
    once more on the way out."""
    while True:
        changed = asyncio.ensure_future(subscriber.changed.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait((changed, stopped), return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()
        stopped.cancel()
        if subscriber.changed.is_set():
            subscriber.changed.clear()
            data = copy.encode(subscriber.replica)
            try:
                await asyncio.to_thread(copy.write, data)
            except OSError as exc:
                log.warning("could not save %s: %s", copy.path, exc)
        if stop.is_set():
            return
        await wait(stop, SAVE_EVERY)
