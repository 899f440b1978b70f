"""The measured team of the fairness benchmark: ordinary reads, writes and a watch in its own
namespace at a modest, fixed rate (open loop: each request is sent on schedule, whatever the
previous one is doing, so a slow server shows as latency rather than as fewer requests).

Each request is labelled by ``label(sent_at)`` (``"quiet"``, ``"flood"``, or None to leave it
out), so quiet and flooded samples can come from interleaved slices of one run. Recorded: the
latency of every request by operation (get, list, create, update (a merge patch), delete of
the previous cycle's create, so the namespace stays small; a watch's start counts as
``watch_start``), and the delay from sending each create until the team's watch delivers it
(``watch_event``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import httpx

from bench.fairness.cluster import API

OPS = ("get", "list", "create", "update", "delete")
Label = Callable[[float], str | None]


class Team:
    def __init__(self, api: httpx.AsyncClient, urls: list[str], token: str, ns: str) -> None:
        self.api = api
        self.urls = urls
        self.auth = {"Authorization": f"Bearer {token}"}
        self.coll = f"{API}/namespaces/{ns}/configmaps"
        self.latency: dict[str, dict[str, list[float]]] = {}
        self.failures: dict[str, int] = defaultdict(int)
        self._created: dict[str, tuple[float, str | None]] = {}
        self._label: Label = lambda t: "quiet"
        self._phase = 0

    async def seed(self, n: int) -> None:
        for i in range(n):
            r = await self.api.post(
                self.urls[0] + self.coll, headers=self.auth,
                json={"metadata": {"name": f"seed-{i}"}, "data": {"i": str(i)}},
            )  # fmt: skip
            assert r.status_code in (201, 409), r.text

    async def run(
        self, start: float, seconds: float, rate: float, label: Label
    ) -> dict[str, dict[str, list[float]]]:
        """Run the team from monotonic time ``start`` for ``seconds``; returns the latencies
        (s) by label and operation."""
        self.latency = defaultdict(lambda: defaultdict(list))
        self.failures = defaultdict(int)
        self._created = {}
        self._label = label
        self._phase += 1
        await asyncio.sleep(max(0.0, start - 1.0 - time.monotonic()))
        watch = asyncio.ensure_future(self._watch(self.urls[0], seconds + 10))
        tasks: list[asyncio.Task[None]] = []
        for i in range(int(seconds * rate)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self._op(OPS[i % len(OPS)], i)))
        await asyncio.gather(*tasks)
        await asyncio.sleep(1.0)  # the last creates' events
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        return {k: dict(v) for k, v in self.latency.items()}

    def _record(self, sent: float, op: str, seconds: float) -> None:
        label = self._label(sent)
        if label is not None:
            self.latency[label][op].append(seconds)

    async def _op(self, op: str, i: int) -> None:
        base = self.urls[i % len(self.urls)]
        cycle = i // len(OPS)
        name = f"t{self._phase}-{cycle}"
        t0 = time.monotonic()
        try:
            if op == "get":
                r = await self.api.get(f"{base}{self.coll}/seed-{i % 20}", headers=self.auth)
            elif op == "list":
                r = await self.api.get(base + self.coll, headers=self.auth)
            elif op == "create":
                body = {"metadata": {"name": name}, "data": {"i": str(i)}}
                self._created[name] = (t0, self._label(t0))
                r = await self.api.post(base + self.coll, headers=self.auth, json=body)
            elif op == "delete":
                old = f"{base}{self.coll}/t{self._phase}-{cycle - 1}"
                r = await self.api.delete(old, headers=self.auth)
                if r.status_code == 404 and cycle == 0:
                    return
            else:  # a merge patch: an update needs no resourceVersion this way
                r = await self.api.patch(
                    f"{base}{self.coll}/seed-{i % 20}",
                    headers={**self.auth, "Content-Type": "application/merge-patch+json"},
                    content=json.dumps({"data": {"i": str(i)}}),
                )
        except httpx.HTTPError:
            self.failures[op] += 1
            return
        if r.status_code >= 300:
            self.failures[f"{op}_{r.status_code}"] += 1
            return
        self._record(t0, op, time.monotonic() - t0)

    async def _watch(self, base: str, seconds: float) -> None:
        t0 = time.monotonic()
        params = {"watch": "1", "timeoutSeconds": str(int(seconds))}
        async with self.api.stream("GET", base + self.coll, params=params, headers=self.auth) as r:
            if r.status_code != 200:
                self.failures[f"watch_{r.status_code}"] += 1
                return
            self._record(t0, "watch_start", time.monotonic() - t0)
            async for line in r.aiter_lines():
                if not line:
                    continue
                event: dict[str, Any] = json.loads(line)
                name = event.get("object", {}).get("metadata", {}).get("name", "")
                sent = self._created.pop(name, None)
                if event.get("type") == "ADDED" and sent is not None:
                    label = sent[1]
                    if label is not None:
                        self.latency[label]["watch_event"].append(time.monotonic() - sent[0])
