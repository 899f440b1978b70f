"""Resource usage as time series in Redis, kept out of PostgreSQL's state tables on purpose.

Every agent reports its pods' CPU and memory every 10 s. That is metrics, not state: nothing
reads it inside a transaction, losing a sample costs nothing, and writing 10,000 nodes' samples
into the state tables would load the revision stream and the WAL with rows nobody watches. So
the API server records samples here (``app.api.usage``), `qm top` reads the latest figures, and
the reclaim controller reads an hour of history per node to compute batch-allocatable capacity.

Keys (all under ``qm:usage:``):

* ``hist:{node}`` -- the node's history: a string of fixed-size little-endian records ``(at in
  ms, priority, cpu millicores, memory bytes)``, one per priority present in each sample (what
  the node's pods of that priority used together: all the reclaim controller needs). A sample
  without pods is one record at the lowest priority, so every sample leaves a trace. Records
  are appended in time order (a sample whose time is not after the newest is filed 1 ms after
  it, so a clock stepping back never loses a sample); those older than ``retention_s`` behind
  the newest are cut off once they are a tenth of the string, and the key expires after
  ``retention_s`` without samples (a removed node's history goes away by itself). One GET reads
  an hour: about 30 KB for three priorities, where a stream of whole samples cost a parsed
  entry per sample and every pod's figures in each.
* ``latest:{node}`` -- the newest sample, whole; ``nodes`` -- a sorted set node -> its time.
* ``pods:{namespace}`` -- a hash pod name -> the pod's newest figures and its node; a pod that
  leaves a node's sample is removed from it (``podnames:{node}`` holds the ``namespace/name``
  of the pods in the node's last sample). ``namespaces`` -- the namespaces with such hashes.

`record` is one Lua script: one round trip per sample, applied whole.

"Latest" means fresh: figures older than ``stale_s`` (default 60 s, six missed reports) are not
returned by `latest`, `latest_nodes`, `pod` or `pods`; an agent that stopped reporting has no
current usage. `history` and `production` cover the whole retention. The clock is injected
for tests.
"""

from __future__ import annotations

import json
import struct
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import redis.asyncio as aioredis

from app.core.controllers.reclaim import NO_SAMPLES, PodUse, Sample, Series

PREFIX = "qm:usage:"
NODES_KEY = PREFIX + "nodes"
NAMESPACES_KEY = PREFIX + "namespaces"
HISTORY_PREFIX = PREFIX + "hist:"

RECORD = struct.Struct("<qiqq")  # at ms, priority, cpu millicores, memory bytes
_RECORDS = np.dtype([("at", "<i8"), ("prio", "<i4"), ("cpu", "<i8"), ("mem", "<i8")])
NO_PODS = -(2**31)  # the priority of the record standing for a sample without pods

# Records one sample in one round trip, atomically (a Lua script runs alone):
#
# 1. the history: the sample's records appended, filed at the sample's time unless the history
#    already ends at or after it, then what is older than the cutoff cut once that is a tenth
#    of the history (a binary search over the fixed-size records; cutting on every append
#    would copy the string each time);
# 2. the node's latest sample, and its time in the ``nodes`` index (old entries dropped);
# 3. each pod's latest figures in ``pods:{namespace}``, and pods that were in the node's
#    previous sample but not in this one taken out (``podnames:{node}`` remembers them).
#
# KEYS: hist:{node}, latest:{node}, nodes, podnames:{node}, namespaces
# ARGV: at ms, cutoff ms, records, ttl s, latest sample, node, at s, nodes cutoff s, the pods
#       hash prefix, then per pod: namespace, name, figures. The pods hashes are named by the
#       pods' namespaces, so they are not in KEYS: fine on one Redis, not on a Redis Cluster.
_RECORD = f"""
local key, at, cutoff, recs = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local size = {RECORD.size}
local len = redis.call('STRLEN', key)
if len >= size then
  local last = struct.unpack('<i8', redis.call('GETRANGE', key, len - size, len - size + 7))
  if last >= at then
    at = last + 1
    local fixed = {{}}
    for i = 1, #recs, size do
      fixed[#fixed + 1] = struct.pack('<i8', at) .. string.sub(recs, i + 8, i + size - 1)
    end
    recs = table.concat(fixed)
  end
end
len = redis.call('APPEND', key, recs)
local n = len / size
local lo, hi = 0, n
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  local off = mid * size
  if struct.unpack('<i8', redis.call('GETRANGE', key, off, off + 7)) < cutoff then
    lo = mid + 1
  else
    hi = mid
  end
end
if lo > 0 and lo >= n / 10 then
  redis.call('SET', key, redis.call('GETRANGE', key, lo * size, -1))
end
redis.call('EXPIRE', key, ARGV[4])

redis.call('SET', KEYS[2], ARGV[5], 'EX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[8])

local prefix, present, members, spaces = ARGV[9], {{}}, {{}}, {{}}
for i = 10, #ARGV, 3 do
  local ns, name = ARGV[i], ARGV[i + 1]
  redis.call('HSET', prefix .. ns, name, ARGV[i + 2])
  local member = ns .. '/' .. name
  present[member] = true
  members[#members + 1] = member
  if not spaces[ns] then
    spaces[ns] = true
    redis.call('SADD', KEYS[5], ns)
  end
end
for _, member in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if not present[member] then
    local ns, name = string.match(member, '^([^/]*)/(.*)$')
    redis.call('HDEL', prefix .. ns, name)
  end
end
redis.call('DEL', KEYS[4])
for i = 1, #members, 500 do
  redis.call('SADD', KEYS[4], unpack(members, i, math.min(i + 499, #members)))
end
redis.call('EXPIRE', KEYS[4], ARGV[4])
return at
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


def bands_of(sample: NodeSample) -> tuple[PodUse, ...]:
    """The sample's pods summed by priority, ascending: one figure per priority."""
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    for p in sample.pods:
        cpu[p.priority] += p.cpu_millis
        mem[p.priority] += p.memory_bytes
    return tuple(PodUse(prio, cpu[prio], mem[prio]) for prio in sorted(cpu))


def encode_history(sample: NodeSample, at_ms: int) -> bytes:
    bands = bands_of(sample) or (PodUse(NO_PODS, 0, 0),)
    return b"".join(RECORD.pack(at_ms, b.priority, b.cpu_millis, b.memory_bytes) for b in bands)


def decode_history(raw: bytes, since: float) -> list[Sample]:
    """The samples of a history taken at or after ``since``, oldest first; each sample's
    ``pods`` are its figures by priority."""
    floor = since * 1000
    out: list[Sample] = []
    at_ms, bands = -1, list[PodUse]()
    for at, prio, cpu, mem in RECORD.iter_unpack(raw):
        if at < floor:
            continue
        if at != at_ms:
            if at_ms >= 0:
                out.append(Sample(at_ms / 1000, tuple(bands)))
            at_ms, bands = at, []
        if prio != NO_PODS:
            bands.append(PodUse(prio, cpu, mem))
    if at_ms >= 0:
        out.append(Sample(at_ms / 1000, tuple(bands)))
    return out


def production_of(raw: bytes, since: float, threshold: int) -> Series:
    """Per sample at or after ``since``, oldest first: its time and the summed cpu millicores
    and memory bytes of priorities at or above ``threshold``. The reclaim controller reads an
    hour of every node every 10 s, so this works on the records as arrays."""
    whole = len(raw) - len(raw) % RECORD.size
    if not whole:
        return NO_SAMPLES
    rec = np.frombuffer(raw[:whole], dtype=_RECORDS)
    at = rec["at"]
    starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1])))
    counted = rec["prio"] >= threshold
    cpu = np.add.reduceat(np.where(counted, rec["cpu"], 0), starts)
    mem = np.add.reduceat(np.where(counted, rec["mem"], 0), starts)
    times = at[starts]
    first = int(np.searchsorted(times, since * 1000))
    return Series(times[first:] / 1000, cpu[first:], mem[first:])


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


def _blob(value: Any) -> bytes:
    """A history as read: binary, so the client must not decode responses."""
    if value is None:
        return b""
    if not isinstance(value, bytes):
        raise TypeError("usage histories are binary: use a Redis client with bytes responses")
    return value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_json = msgspec.json.Encoder().encode


def encode(sample: NodeSample, pods: list[dict[str, Any]] | None = None) -> bytes:
    """The sample as kept for `latest`; ``pods``: its pods' ``_pod_dict``s, if already built."""
    return _json(
        {
            "node": sample.node,
            "at": sample.at,
            "cpu": sample.cpu_millis,
            "mem": sample.memory_bytes,
            "win": sample.window_s,
            "pods": [_pod_dict(p) for p in sample.pods] if pods is None else pods,
        }
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
        self._record = redis.register_script(_RECORD)

    async def record(self, sample: NodeSample) -> None:
        """Appends the sample to the node's history and makes it the node's latest: one
        script, one round trip."""
        ttl = max(1, int(self.retention_s))
        at_ms = max(0, int(sample.at * 1000))
        node = sample.node
        pods = [_pod_dict(p) for p in sample.pods]
        args: list[Any] = [
            at_ms,
            at_ms - int(self.retention_s * 1000),
            encode_history(sample, at_ms),
            ttl,
            encode(sample, pods),
            node,
            sample.at,
            sample.at - self.retention_s,
            PREFIX + "pods:",
        ]
        where = {"node": node, "at": sample.at, "win": sample.window_s}
        for p, d in zip(sample.pods, pods, strict=True):
            args += (p.namespace, p.name, _json(d | where))
        keys = [HISTORY_PREFIX + node, PREFIX + "latest:" + node, NODES_KEY,
                PREFIX + "podnames:" + node, NAMESPACES_KEY]  # fmt: skip
        await self._record(keys=keys, args=args)

    async def history(self, node: str, since: float) -> list[Sample]:
        """The node's samples taken at or after `since` (unix seconds), oldest first."""
        return decode_history(_blob(await self.redis.get(HISTORY_PREFIX + node)), since)

    async def production(self, nodes: list[str], since: float, threshold: int) -> dict[str, Series]:
        """`production_of` each node's history, read in one round trip."""
        raws = await self.redis.mget([HISTORY_PREFIX + n for n in nodes]) if nodes else []
        return {
            n: production_of(_blob(raw), since, threshold)
            for n, raw in zip(nodes, raws, strict=True)
        }

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
