"""Simulated discovery subscribers that notice a pod's endpoint changing readiness.

``bench.discovery.subscribers`` recognises a change by a zone the benchmark writes into a
slice by hand; when the EndpointSlice controller writes the slices, the zone is the node's and
only the endpoint's ``r`` changes. So ``bench.discovery.pod_freshness`` starts these instead
(``python -m bench.discovery.pod_subscribers``): the same subscribers (``Sub``, ``Pool``: real
TCP connections on uvloop, acknowledging every version, dialling again with the version held),
whose copy also watches a set of endpoint keys, each for one change: when a message leaves a
watched endpoint with the expected readiness, the subscriber notes, once per change, when
(``time.monotonic``, comparable across processes) and at which version.

A change's pod is flipped once per run and its watch is set before the flip, with the value it
flips to, so the subscriber's copy cannot already show it.

Commands, as JSON lines on stdin with one answer line each on stdout: ``connect``, ``stats``,
``watch`` (endpoint key -> [change, ready]; answers how many subscribers lack a watched key),
``seen`` (until every subscriber saw every watched change, or a timeout), ``collect`` (the
notes, and clears the watches), ``close``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from app.core.traffic.protocol import Applied, Replica
from bench.discovery import subscribers
from bench.discovery.subscribers import DIAL_CONCURRENCY, Pool, Sub


@dataclass
class Watching(Replica):
    """A subscriber's copy that notes the first message showing each watched change."""

    pool: WatchPool | None = None
    seen: set[int] = field(default_factory=set)

    def apply(self, message: dict[str, Any]) -> Applied:
        applied = super().apply(message)
        watch = self.pool.watches if self.pool is not None else {}
        if watch and applied.changed:
            now = time.monotonic()
            for key in applied.changed & watch.keys():
                change, ready = watch[key]
                value = self.resources.get(key)
                if change not in self.seen and value is not None and value.get("r") is ready:
                    self.seen.add(change)
                    self.pool.notes.append((change, now, self.version))  # type: ignore[union-attr]
        return applied


class WatchSub(Sub):
    def __init__(self, pool: WatchPool, ident: str) -> None:
        super().__init__(pool, ident)
        self.replica = Watching(pool=pool)


class WatchPool(Pool):
    def __init__(self) -> None:
        super().__init__()
        self.watches: dict[str, tuple[int, bool]] = {}
        self.notes: list[tuple[int, float, int]] = []

    def watching(self) -> list[Watching]:
        return [s.replica for s in self.subs if isinstance(s.replica, Watching)]

    async def connect(
        self, host: str, port: int, prefix: str, count: int, timeout: float = 300
    ) -> dict[str, Any]:
        self.target = (host, port)
        t0 = time.monotonic()
        gate = asyncio.Semaphore(DIAL_CONCURRENCY)
        new = [WatchSub(self, f"{prefix}{i:05d}") for i in range(count)]
        self.subs += new
        await asyncio.gather(*(s.dial(gate) for s in new))
        ok = await self.until(lambda: all(s.replica.version > 0 for s in new), timeout)
        return {"ok": ok, "seconds": time.monotonic() - t0, "subscribers": len(self.subs)}

    def watch(self, keys: dict[str, list[Any]]) -> dict[str, Any]:
        self.watches = {k: (int(v[0]), bool(v[1])) for k, v in keys.items()}
        self.notes = []
        copies = self.watching()
        for r in copies:
            r.seen = set()
        lacking = sum(1 for r in copies if not all(k in r.resources for k in self.watches))
        already = sum(
            1
            for r in copies
            for k, (_, ready) in self.watches.items()
            if (r.resources.get(k) or {}).get("r") is ready
        )
        return {"lacking": lacking, "already": already}

    async def seen(self, timeout: float) -> dict[str, Any]:
        want = {c for c, _ in self.watches.values()}
        copies = self.watching()
        ok = await self.until(lambda: all(r.seen >= want for r in copies), timeout)
        missing = sum(len(want - r.seen) for r in copies)
        return {"ok": ok, "t": time.monotonic(), "missing": missing}

    def collect(self) -> dict[str, Any]:
        notes, self.notes, self.watches = self.notes, [], {}
        return {"notes": notes}


def main() -> None:
    subscribers.main(WatchPool)


if __name__ == "__main__":
    main()
