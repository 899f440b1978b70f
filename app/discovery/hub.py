"""The discovery service's subscribers and the fan-out of every step to them (ADR 0038).

Each subscriber is one TCP connection speaking ``app.core.traffic.protocol``. A step of the
state (``app.core.traffic.state``) is encoded once per scope and written, as the same bytes, to
every subscriber that holds the step's previous version; a subscriber that is behind (it
resumed from an old version, or its socket buffer filled and the transport paused it) is sent
one merged delta of what it missed once it can take it, or a snapshot when the history does not
reach back. Acknowledgements record each subscriber's version and lag; the drain query (the
node agent's question before SIGTERM) reads them.

It runs on the event loop of ``python -m app.discovery``; time comes from an injected clock.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from app.core.traffic import protocol
from app.core.traffic.protocol import ProtocolError, Subscription
from app.core.traffic.state import Change, DiscoveryState, Step
from app.discovery import metrics

log = logging.getLogger(__name__)

# The services changed in (since, upto] by the revision log; None when it cannot tell.
ChangedSince = Callable[[int, int], Awaitable[set[str] | None]]

SUBSCRIBE_TIMEOUT = 10.0
MAX_CLIENT_LINE = 64 * 1024
PING_EVERY = 5.0
KEEP_STEP_TIMES = 4096
KEEP_POD_MARKS = 100_000


@dataclass
class Lag:
    """One subscriber as ``/v1/subscribers`` shows it."""

    id: str
    node: str
    zone: str
    scope: str
    acked: int
    sent: int
    lag_versions: int
    lag_seconds: float
    connected_seconds: float
    nacks: int


class Subscriber(asyncio.Protocol):
    """One subscriber's connection: reads its lines, hands them to the hub."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.sub: Subscription | None = None
        self.sent = 0
        self.acked = 0
        self.paused = False
        self.behind_since: float | None = None
        self.connected_at = hub.clock()
        self.nacks = 0
        self.resuming = False  # its catch-up waits on the revision log
        self._buffer = b""
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        self._timer = asyncio.get_running_loop().call_later(
            SUBSCRIBE_TIMEOUT, self._refuse, "no subscribe message in time"
        )

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            line, sep, rest = self._buffer.partition(b"\n")
            if not sep:
                if len(self._buffer) > MAX_CLIENT_LINE:
                    self._refuse("message too long")
                return
            self._buffer = rest
            try:
                self._receive(protocol.decode(line))
            except ProtocolError as exc:
                self._refuse(str(exc))
                return

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.hub.catch_up(self)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.hub.remove(self)

    # -- messages ---------------------------------------------------------------------------
    def _receive(self, message: dict[str, Any]) -> None:
        if self.sub is None:
            self.sub = protocol.parse_subscribe(message)
            if self._timer is not None:
                self._timer.cancel()
            self.hub.add(self)
            return
        version, nonce = message.get("v"), message.get("nonce")
        if not isinstance(version, int) or not isinstance(nonce, int):
            raise ProtocolError("v and nonce must be integers")
        if message["t"] == "ack":
            self.hub.acked(self, version)
        elif message["t"] == "nack":
            self.hub.nacked(self, version, str(message.get("error", ""))[:200])
        else:
            raise ProtocolError(f"unexpected message type {message['t']!r}")

    def _refuse(self, reason: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            log.info("closing a discovery subscriber: %s", reason)
            self.transport.write(protocol.encode({"t": "error", "error": reason}))
            self.transport.close()

    def write(self, frame: bytes, version: int) -> None:
        assert self.transport is not None
        self.transport.write(frame)
        self.sent = version

    @property
    def ident(self) -> str:
        return self.sub.ident if self.sub else ""


class Hub:
    """Every subscriber of this replica and the state they are streamed."""

    def __init__(
        self, clock: Callable[[], float], changed_since: ChangedSince | None = None
    ) -> None:
        self.clock = clock
        self.changed_since = changed_since
        self._lookups: dict[int, tuple[int, asyncio.Future[set[str] | None]]] = {}
        self._resumes: set[asyncio.Future[None]] = set()
        self.state = DiscoveryState()
        self.loaded = False
        self.subscribers: dict[str, Subscriber] = {}
        self._snapshots: dict[str, tuple[int, bytes]] = {}
        self._step_at: OrderedDict[int, float] = OrderedDict()
        self.changed = asyncio.Event()

    # -- the state --------------------------------------------------------------------------
    def load(self, version: int, changes: Sequence[Change]) -> None:
        """Start from a full list; every subscriber is brought to it."""
        self.state.load(version, changes)
        self.loaded = True
        self._snapshots.clear()
        self._lookups.clear()
        for sub in self.subscribers.values():
            self._send_from(sub, sub.sent)
        metrics.VERSION.set(version)
        self._wake()

    def apply(self, changes: Sequence[Change]) -> Step | None:
        """Apply a batch from the stream and send its step to every subscriber."""
        step = self.state.apply(changes)
        metrics.VERSION.set(self.state.version)
        if step is None:
            return None
        now = self.clock()
        self._step_at[step.version] = now
        while len(self._step_at) > KEEP_STEP_TIMES:
            self._step_at.popitem(last=False)
        metrics.STEPS.inc()
        metrics.ENDPOINT_CHANGES.inc(step.endpoint_changes)
        sent = 0
        for sub in self.subscribers.values():
            if sub.behind_since is None and sub.acked < step.version:
                sub.behind_since = now
            if sub.paused:
                continue
            if sub.sent == step.since:
                assert sub.sub is not None
                sub.write(step.frames[sub.sub.scope], step.version)
                sent += 1
            else:
                self.catch_up(sub)
        metrics.FRAMES.inc(sent)
        metrics.DELTAS.inc(sent * max(step.endpoint_changes, 1))
        self.state.forget_pods(KEEP_POD_MARKS)
        self._wake()
        return step

    # -- subscribers ------------------------------------------------------------------------
    def add(self, sub: Subscriber) -> None:
        assert sub.sub is not None
        old = self.subscribers.get(sub.ident)
        if old is not None and old is not sub and old.transport is not None:
            log.info("subscriber %s connected again; closing its old connection", sub.ident)
            old.transport.close()
        self.subscribers[sub.ident] = sub
        sub.acked = sub.sent = sub.sub.version
        metrics.SUBSCRIBERS.set(len(self.subscribers))
        metrics.CONNECTS.inc()
        if self.loaded:  # otherwise ``load`` brings it up to date
            self._send_from(sub, sub.sub.version)

    def remove(self, sub: Subscriber) -> None:
        if self.subscribers.get(sub.ident) is sub:
            del self.subscribers[sub.ident]
        metrics.SUBSCRIBERS.set(len(self.subscribers))
        self._wake()

    def catch_up(self, sub: Subscriber) -> None:
        """Bring a subscriber that is not at the last step up to date, if it can take it."""
        if sub.sub is None or sub.paused or sub.resuming or not self.loaded:
            return
        if sub.sent == self.state.version:
            return
        if sub.sent > self.state.version:
            return  # it resumed from a replica ahead of this one: wait until this one is there
        self._send_from(sub, sub.sent)

    def _send_from(self, sub: Subscriber, version: int) -> None:
        assert sub.sub is not None
        scope = sub.sub.scope
        if version > self.state.version:
            sub.sent = version
            return
        frame = self.state.catch_up(scope, version) if version else None
        if frame is None and version and self.changed_since is not None:
            sub.resuming = True
            task = asyncio.ensure_future(self._resume(sub, version))
            self._resumes.add(task)
            task.add_done_callback(self._resumes.discard)
            return
        if frame is None:
            frame = self._snapshot(scope)
            metrics.SNAPSHOTS.inc()
        else:
            metrics.CATCH_UPS.inc()
        sub.write(frame, self.state.version)

    async def _resume(self, sub: Subscriber, since: int) -> None:
        """Bring back a subscriber from before this replica's history: the revision log says
        which services changed since its version, and those are sent whole. One lookup per
        version held, shared by every subscriber that holds it (a restart's reconnect storm)."""
        assert sub.sub is not None and self.changed_since is not None
        looked = self._lookups.get(since)
        if looked is None:
            if len(self._lookups) > 256:
                self._lookups.clear()
            upto = self.state.version
            future = asyncio.ensure_future(self.changed_since(since, upto))
            looked = self._lookups[since] = (upto, future)
        try:
            services = await asyncio.shield(looked[1])
        except Exception as exc:
            log.warning("could not read what changed since %d (%s); sending snapshots", since, exc)
            services = None
        finally:
            sub.resuming = False
        if sub.transport is None or sub.transport.is_closing() or sub.sent != since:
            return
        frame = None
        if services is not None:
            frame = self.state.catch_up_services(sub.sub.scope, since, services, looked[0])
        if frame is None:
            frame = self._snapshot(sub.sub.scope)
            metrics.SNAPSHOTS.inc()
        else:
            metrics.CATCH_UPS.inc()
        sub.write(frame, self.state.version)

    def _snapshot(self, scope: str) -> bytes:
        cached = self._snapshots.get(scope)
        if cached is None or cached[0] != self.state.version:
            cached = (self.state.version, self.state.snapshot(scope))
            self._snapshots[scope] = cached
        return cached[1]

    def acked(self, sub: Subscriber, version: int) -> None:
        if version > sub.sent or version < sub.acked:
            return
        sub.acked = version
        at = self._step_at.get(version)
        if at is not None:
            metrics.ACK_SECONDS.observe(self.clock() - at)
        if version >= self.state.version:
            sub.behind_since = None

    def nacked(self, sub: Subscriber, version: int, error: str) -> None:
        sub.nacks += 1
        metrics.NACKS.inc()
        log.warning("subscriber %s refused version %d (%s); sending a snapshot", sub.ident,
                    version, error)  # fmt: skip
        if not sub.paused:
            sub.write(self._snapshot(sub.sub.scope if sub.sub else "all"), self.state.version)

    def ping(self) -> None:
        frame = protocol.ping(self.state.version)
        for sub in self.subscribers.values():
            if sub.transport is not None and not sub.paused:
                sub.transport.write(frame)

    # -- what operators and the agent ask ---------------------------------------------------
    def lags(self) -> list[Lag]:
        now = self.clock()
        out = []
        for sub in self.subscribers.values():
            assert sub.sub is not None
            behind = sub.behind_since
            out.append(
                Lag(
                    sub.ident,
                    sub.sub.node,
                    sub.sub.zone,
                    sub.sub.scope,
                    sub.acked,
                    sub.sent,
                    max(self.state.version - sub.acked, 0),
                    0.0 if behind is None else round(now - behind, 3),
                    round(now - sub.connected_at, 3),
                    sub.nacks,
                )
            )
        return out

    def drained(self, namespace: str, pod: str) -> tuple[bool, int | None, list[str]]:
        """Whether every live subscriber that receives the pod's services holds a version in
        which none of the pod's endpoints takes new connections; that version; who lags."""
        if not self.loaded:
            return False, None, ["(this replica has not loaded its state)"]
        done, version, services = self.state.drained_at(namespace, pod)
        if not done:
            return False, version, ["(the endpoint is not marked terminating yet)"]
        if version is None:
            return True, None, []
        exposed = any(self.state.in_scope("exposed", s) for s in services)
        waiting = [
            s.ident
            for s in self.subscribers.values()
            if s.sub is not None and (s.sub.scope == "all" or exposed) and s.acked < version
        ]
        return not waiting, version, waiting

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()
