"""Simulated discovery subscribers: one process holding many real subscriber connections.

``bench.discovery.run`` starts 2-4 of these (``python -m bench.discovery.subscribers``) on
uvloop, so the subscribers' own decoding is spread over processes and is not what the
benchmark measures. Each subscriber is one TCP connection speaking
``app.core.traffic.protocol`` through a ``Replica`` and acknowledging every version it applies.
When its connection drops it dials again every 100-300 ms (uniform jitter) with the version it
holds, as the node proxy does.

The benchmark's changes set an endpoint's zone to ``q<seq>``; a subscriber notes the highest
``seq`` it holds and, while recording, when it applied each new one (``time.monotonic``, which
is CLOCK_MONOTONIC and so comparable across processes). One shortcut: a snapshot line equal to
the last one decoded here (discovery caches a snapshot per version, so all subscribers get the
same bytes) is decoded once and each subscriber gets its own copy of the resource dict.

Commands come as JSON lines on stdin, answers go as JSON lines on stdout (one per command):
``connect``, ``stats``, ``minseq``, ``record``, ``wait_seq``, ``arm``, ``current``, ``close``.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import uvloop

from app.core.traffic import protocol
from app.core.traffic.protocol import Replica

MARK = "q"
DIAL_CONCURRENCY = 200


class Sub(asyncio.Protocol):
    """One subscriber: its replica, its connection, what it saw."""

    def __init__(self, pool: Pool, ident: str) -> None:
        self.pool, self.ident = pool, ident
        self.replica = Replica()
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []
        self.seq = -1
        self.attempts = 0
        self.events: list[tuple[float, str, int, int]] | None = None  # after ``arm``

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.pending = []
        if self.events is not None:
            self.events.append((time.monotonic(), "connected", self.replica.version, 0))
        sub = protocol.subscribe(self.ident, f"node-{self.ident}", "zone-a", "all",
                                 self.replica.version)  # fmt: skip
        self.transport.write(sub)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.pool.reconnect:
            self.pool.loop.call_later(random.uniform(0.1, 0.3), self.redial)

    def redial(self) -> None:
        task = asyncio.ensure_future(self.dial(None))
        self.pool.dialling.add(task)
        task.add_done_callback(self.pool.dialling.discard)

    async def dial(self, gate: asyncio.Semaphore | None) -> None:
        while self.pool.reconnect or gate is not None:
            self.attempts += 1
            try:
                if gate is None:
                    await self.pool.loop.create_connection(lambda: self, *self.pool.target)
                else:
                    async with gate:
                        await self.pool.loop.create_connection(lambda: self, *self.pool.target)
                return
            except OSError:
                await asyncio.sleep(random.uniform(0.1, 0.3))

    def data_received(self, data: bytes) -> None:
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                if start < len(data):
                    self.pending.append(data[start:])
                return
            if self.pending:
                self.pending.append(data[start:i])
                line, self.pending = b"".join(self.pending), []
            else:
                line = data[start:i]
            start = i + 1
            self.handle(line)

    def handle(self, line: bytes) -> None:
        pool = self.pool
        message = pool.snapshot(line) if line.startswith(b'{"t":"snapshot"') else None
        if message is None:
            message = protocol.decode(line)
        applied = self.replica.apply(message)
        now = time.monotonic()
        kind, size = message["t"], len(line) + 1
        pool.bytes += size
        if kind == "delta":
            pool.deltas += 1
            changed, removed = message["set"], message["del"]
            pool.endpoint_changes += sum(1 for k in changed if k[0] == "e")
            pool.endpoint_changes += sum(1 for k in removed if k[0] == "e")
            if len(changed) + len(removed) == 1:
                pool.one_sizes[size] += 1
            old = self.seq
            for value in changed.values():
                zone = value.get("z") or ""
                if zone[:1] == MARK:
                    seq = int(zone[1:])
                    if seq > old and pool.recording:
                        pool.lat.append((seq, now))
                    self.seq = max(self.seq, seq)
        elif kind == "snapshot":
            pool.snapshots += 1
            pool.snapshot_sizes[size] += 1
            self.seq = max(self.seq, pool.snapshot_seq)
        if self.events is not None and kind != "ping":
            self.events.append((now, kind, self.replica.version, size))
        if applied.reply is not None and self.transport is not None:
            if applied.reply.startswith(b'{"t":"nack"'):
                pool.nacks += 1
            self.transport.write(applied.reply)


class Pool:
    """Every subscriber of this process, and the counters they share."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.target = ("127.0.0.1", 0)
        self.subs: list[Sub] = []
        self.dialling: set[asyncio.Future[None]] = set()
        self.reconnect = True
        self.recording = False
        self.lat: list[tuple[int, float]] = []
        self.bytes = self.deltas = self.endpoint_changes = self.snapshots = self.nacks = 0
        self.one_sizes: Counter[int] = Counter()
        self.snapshot_sizes: Counter[int] = Counter()
        self._snap_line = b""
        self._snap: dict[str, Any] = {}
        self.snapshot_seq = -1

    def snapshot(self, line: bytes) -> dict[str, Any]:
        if line != self._snap_line:
            self._snap, self._snap_line = protocol.decode(line), line
            zones = (v.get("z") or "" for v in self._snap.get("resources", {}).values())
            self.snapshot_seq = max((int(z[1:]) for z in zones if z[:1] == MARK), default=-1)
        return {**self._snap, "resources": dict(self._snap["resources"])}

    async def until(self, done: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    # -- commands -------------------------------------------------------------------------
    async def connect(self, host: str, port: int, prefix: str, count: int,
                      timeout: float = 300) -> dict[str, Any]:  # fmt: skip
        self.target = (host, port)
        t0 = time.monotonic()
        gate = asyncio.Semaphore(DIAL_CONCURRENCY)
        new = [Sub(self, f"{prefix}{i:05d}") for i in range(count)]
        self.subs += new
        await asyncio.gather(*(s.dial(gate) for s in new))
        ok = await self.until(lambda: all(s.replica.version > 0 for s in new), timeout)
        return {"ok": ok, "seconds": time.monotonic() - t0, "subscribers": len(self.subs)}

    def stats(self) -> dict[str, Any]:
        versions = [s.replica.version for s in self.subs] or [0]
        return {"t": time.monotonic(), "bytes": self.bytes, "deltas": self.deltas,
                "endpoint_changes": self.endpoint_changes, "snapshots": self.snapshots,
                "nacks": self.nacks, "one_sizes": dict(self.one_sizes),
                "snapshot_sizes": dict(self.snapshot_sizes), "min_version": min(versions),
                "max_version": max(versions), "min_seq": self.min_seq(),
                "connected": sum(s.transport is not None for s in self.subs)}  # fmt: skip

    def min_seq(self) -> int:
        return min((s.seq for s in self.subs), default=-1)

    def minseq(self) -> dict[str, Any]:
        return {"t": time.monotonic(), "min_seq": self.min_seq()}

    def record(self, on: bool) -> dict[str, Any]:
        self.recording = on
        lat, self.lat = self.lat, []
        return {"lat": lat}

    async def wait_seq(self, seq: int, timeout: float) -> dict[str, Any]:
        ok = await self.until(lambda: self.min_seq() >= seq, timeout)
        return {"ok": ok, "t": time.monotonic(), "min_seq": self.min_seq()}

    def arm(self) -> dict[str, Any]:
        for s in self.subs:
            s.events, s.attempts = [], 0
        return {"t": time.monotonic()}

    async def current(self, version: int, timeout: float) -> dict[str, Any]:
        """Once every subscriber applied, on a connection made after ``arm``, a message at
        ``version`` or later: when each did, and what brought it there."""

        def first(s: Sub) -> tuple[float, str, int, int] | None:
            seen = False
            for event in s.events or ():
                seen = seen or event[1] == "connected"
                if seen and event[1] != "connected" and event[2] >= version:
                    return event
            return None

        ok = await self.until(lambda: all(first(s) is not None for s in self.subs), timeout)
        found = [first(s) for s in self.subs]
        return {"ok": ok, "t": [e[0] for e in found if e], "kinds": Counter(e[1] for e in found
                if e), "sizes": Counter(e[3] for e in found if e), "missing": found.count(None),
                "attempts": Counter(s.attempts for s in self.subs)}  # fmt: skip

    def close(self) -> dict[str, Any]:
        self.reconnect = False
        for s in self.subs:
            if s.transport is not None:
                s.transport.close()
        return {"closed": len(self.subs)}


async def serve(make_pool: Callable[[], Pool] = Pool) -> None:
    """Answer the benchmark's commands (one JSON line each on stdin) with ``make_pool()``'s."""
    pool = make_pool()
    reader = asyncio.StreamReader(limit=2**24)
    await pool.loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        cmd = json.loads(line)
        name = cmd.pop("cmd")
        answer = getattr(pool, name)(**cmd)
        if asyncio.iscoroutine(answer):
            answer = await answer
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if name == "close":
            await asyncio.sleep(0.5)
            return


def main(make_pool: Callable[[], Pool] = Pool) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvloop.run(serve(make_pool))


if __name__ == "__main__":
    main()
