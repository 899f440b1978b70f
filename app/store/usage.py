"""Resource usage as time series in Redis, kept out of PostgreSQL's state tables on purpose.

Every agent reports its pods' CPU and memory every 10 s. That is metrics, not state: nothing
reads it inside a transaction, losing a sample costs nothing, and writing 10,000 nodes' samples
into the state tables would load the revision stream and the WAL with rows nobody watches. So
the API server records samples here (``app.api.usage``), `qm top` reads the latest figures, and
the reclaim controller reads an hour of history per node to compute batch-allocatable capacity.

Keys (all under ``qm:usage:``):

* ``node:{node}`` -- a stream of the node's samples, entry ids ``{at in ms}-{seq}`` (a sample
  whose time is not after the newest is filed just after it, so a clock stepping back never
  loses a sample), trimmed by ``MINID`` to ``retention_s`` behind the newest sample and expired
  after ``retention_s`` without samples (a removed node's history goes away by itself).
* ``latest:{node}`` -- the newest sample, whole; ``nodes`` -- a sorted set node -> its time.
* ``pods:{namespace}`` -- a hash pod name -> the pod's newest figures and its node; a pod that
  leaves a node's sample is removed from it. ``namespaces`` -- the namespaces with such hashes.

"Latest" means fresh: figures older than ``stale_s`` (default 60 s, six missed reports) are not
returned by `latest`, `latest_nodes`, `pod` or `pods`; an agent that stopped reporting has no
current usage. `history` covers the whole retention. The clock is injected for tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

PREFIX = "qm:usage:"
NODES_KEY = PREFIX + "nodes"
NAMESPACES_KEY = PREFIX + "namespaces"

# Files the sample at its own time unless the stream already holds a later one, then trims the
# stream exactly (one entry leaves per entry added, so exact trimming stays cheap).
_APPEND = """
local key = KEYS[1]
local id = ARGV[1] .. '-0'
local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
if #last > 0 then
  local lms, lseq = string.match(last[1][1], '(%d+)-(%d+)')
  if tonumber(lms) >= tonumber(ARGV[1]) then id = lms .. '-' .. (tonumber(lseq) + 1) end
end
redis.call('XADD', key, 'MINID', ARGV[2], id, 's', ARGV[3])
redis.call('EXPIRE', key, ARGV[4])
return id
"""


@dataclass(frozen=True)
class ContainerUsage:
    name: str
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True)
class PodUsage:
    namespace: str
    name: str
    uid: str
    priority: int
    cpu_millis: int
    memory_bytes: int
    containers: tuple[ContainerUsage, ...] = ()
    node: str = ""  # filled in by the store on reads
    at: float = 0.0  # the sample's time; filled in by the store on reads
    window_s: float = 10.0  # the interval the CPU figure averages over; filled in on reads


@dataclass(frozen=True)
class NodeSample:
    node: str
    at: float  # unix seconds, when the agent read the figures
    cpu_millis: int  # the whole node: the sum of its pods
    memory_bytes: int
    pods: tuple[PodUsage, ...]
    window_s: float = 10.0  # the agent's sampling interval: what the CPU figures average over


def _pod_dict(p: PodUsage) -> dict[str, Any]:
    return {
        "ns": p.namespace,
        "name": p.name,
        "uid": p.uid,
        "prio": p.priority,
        "cpu": p.cpu_millis,
        "mem": p.memory_bytes,
        "ctr": [[c.name, c.cpu_millis, c.memory_bytes] for c in p.containers],
    }


def _pod_from(d: dict[str, Any], node: str, at: float, window_s: float) -> PodUsage:
    return PodUsage(
        namespace=d["ns"],
        name=d["name"],
        uid=d["uid"],
        priority=d["prio"],
        cpu_millis=d["cpu"],
        memory_bytes=d["mem"],
        containers=tuple(ContainerUsage(n, c, m) for n, c, m in d.get("ctr", ())),
        node=node,
        at=at,
        window_s=window_s,
    )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def encode(sample: NodeSample) -> str:
    return json.dumps(
        {
            "node": sample.node,
            "at": sample.at,
            "cpu": sample.cpu_millis,
            "mem": sample.memory_bytes,
            "win": sample.window_s,
            "pods": [_pod_dict(p) for p in sample.pods],
        },
        separators=(",", ":"),
    )


def decode(raw: str | bytes) -> NodeSample:
    d = json.loads(raw)
    node, at, window_s = d["node"], d["at"], d.get("win", 10.0)
    return NodeSample(
        node=node,
        at=at,
        cpu_millis=d["cpu"],
        memory_bytes=d["mem"],
        pods=tuple(_pod_from(p, node, at, window_s) for p in d["pods"]),
        window_s=window_s,
    )


class UsageStore:
    """Records and reads usage samples; one instance per process, shared by its tasks."""

    def __init__(
        self,
        redis: aioredis.Redis,
        retention_s: float = 3900.0,
        *,
        stale_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.retention_s = retention_s
        self.stale_s = stale_s
        self.clock = clock
        self._append = redis.register_script(_APPEND)

    async def record(self, sample: NodeSample) -> None:
        """Appends the sample to the node's history and makes it the node's latest."""
        latest_key = PREFIX + "latest:" + sample.node
        previous = await self.redis.get(latest_key)
        gone: set[tuple[str, str]] = set()
        if previous is not None:
            gone = {(p.namespace, p.name) for p in decode(previous).pods}
        gone -= {(p.namespace, p.name) for p in sample.pods}
        raw = encode(sample)
        ttl = max(1, int(self.retention_s))
        at_ms = max(0, int(sample.at * 1000))
        pipe = self.redis.pipeline(transaction=True)
        await self._append(
            keys=[PREFIX + "node:" + sample.node],
            args=[at_ms, max(0, at_ms - int(self.retention_s * 1000)), raw, ttl],
            client=pipe,
        )
        pipe.set(latest_key, raw, ex=ttl)
        pipe.zadd(NODES_KEY, {sample.node: sample.at})
        pipe.zremrangebyscore(NODES_KEY, "-inf", sample.at - self.retention_s)
        by_ns: dict[str, dict[Any, Any]] = {}
        for p in sample.pods:
            entry = _pod_dict(p) | {"node": sample.node, "at": sample.at, "win": sample.window_s}
            by_ns.setdefault(p.namespace, {})[p.name] = json.dumps(entry, separators=(",", ":"))
        for ns, fields in by_ns.items():
            pipe.hset(PREFIX + "pods:" + ns, mapping=fields)
        if by_ns:
            pipe.sadd(NAMESPACES_KEY, *by_ns)
        for ns, name in gone:
            pipe.hdel(PREFIX + "pods:" + ns, name)
        await pipe.execute()

    async def history(self, node: str, since: float) -> list[NodeSample]:
        """The node's samples taken at or after `since` (unix seconds), oldest first."""
        entries: Any = await self.redis.xrange(PREFIX + "node:" + node, min=str(int(since * 1000)))
        samples = [decode(fields[b"s"]) for _id, fields in entries]
        return [s for s in samples if s.at >= since]

    async def latest(self, node: str) -> NodeSample | None:
        raw = await self.redis.get(PREFIX + "latest:" + node)
        if raw is None:
            return None
        sample = decode(raw)
        return sample if self._fresh(sample.at) else None

    async def latest_nodes(self) -> list[NodeSample]:
        """Every node's latest sample that is still fresh, by node name."""
        names = await self.redis.zrangebyscore(NODES_KEY, self.clock() - self.stale_s, "+inf")
        if not names:
            return []
        raws = await self.redis.mget([PREFIX + "latest:" + _text(n) for n in names])
        samples = [decode(r) for r in raws if r is not None]
        return sorted((s for s in samples if self._fresh(s.at)), key=lambda s: s.node)

    async def pod(self, namespace: str, name: str) -> PodUsage | None:
        raw = await self.redis.hget(PREFIX + "pods:" + namespace, name)
        if raw is None:
            return None
        pod = self._pod_entry(raw)
        return pod if self._fresh(pod.at) else None

    async def pods(self, namespace: str | None) -> list[PodUsage]:
        """Fresh pod figures of one namespace, or of all when `namespace` is None; entries older
        than the retention (their node stopped reporting long ago) are deleted on the way."""
        if namespace is None:
            namespaces = sorted(_text(n) for n in await self.redis.smembers(NAMESPACES_KEY))
        else:
            namespaces = [namespace]
        out: list[PodUsage] = []
        for ns in namespaces:
            key = PREFIX + "pods:" + ns
            entries = await self.redis.hgetall(key)
            stale = []
            for field, raw in entries.items():
                pod = self._pod_entry(raw)
                if self._fresh(pod.at):
                    out.append(pod)
                elif pod.at < self.clock() - self.retention_s:
                    stale.append(field)
            if stale:
                await self.redis.hdel(key, *stale)
        return sorted(out, key=lambda p: (p.namespace, p.name))

    def _fresh(self, at: float) -> bool:
        return at >= self.clock() - self.stale_s

    @staticmethod
    def _pod_entry(raw: str | bytes) -> PodUsage:
        d = json.loads(raw)
        return _pod_from(d, d["node"], d["at"], d.get("win", 10.0))
