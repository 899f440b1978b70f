"""Usage rollup: every minute, the latest per-pod usage in Redis (``app.store.usage``) summed per
namespace and node and appended to ``qm_usage_rollup``, so the reporting views can show measured
usage beside requests for longer than Redis keeps samples (an hour).

One row per (minute, namespace, node): pods with a fresh sample, their summed CPU millicores and
memory bytes. The loop ticks every 30 s, so no minute is skipped however the ticks drift; the
first tick of a minute writes it, a later one in the same minute skips Redis, and a new
leader's tick in a minute already written adds nothing (``ON CONFLICT DO NOTHING``).
Telemetry, not state: the table has no history triggers. It is bounded: rows older than the
retention (35 days by default) are deleted by the same loop in small batches, oldest first.

``rollup`` is the pure part (unit-tested); the loop reads Redis through ``UsageStore`` whose
clock is the manager's injected wall clock.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis.asyncio as aioredis

from app.store.usage import PodUsage, UsageStore
from workers.loops import Context


@dataclass(frozen=True)
class RollupRow:
    minute: datetime
    namespace: str
    node: str
    pods: int
    cpu_milli: int
    memory_bytes: int


def minute_of(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def rollup(pods: Iterable[PodUsage], minute: datetime) -> list[RollupRow]:
    """The pods' figures summed per (namespace, node), sorted; a pod without a node (none is
    read that way from the store, but a sample may lack one) counts under ``''``."""
    sums: dict[tuple[str, str], list[int]] = {}
    for p in pods:
        acc = sums.setdefault((p.namespace, p.node), [0, 0, 0])
        acc[0] += 1
        acc[1] += max(0, p.cpu_millis)
        acc[2] += max(0, p.memory_bytes)
    return [
        RollupRow(minute, ns, node, n, cpu, mem)
        for (ns, node), (n, cpu, mem) in sorted(sums.items())
    ]


_INSERT = """
INSERT INTO qm_usage_rollup (minute, namespace, node, pods, cpu_milli, memory_bytes)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::int[], $5::bigint[],
                     $6::bigint[])
ON CONFLICT (minute, namespace, node) DO NOTHING
"""

_PRUNE = """
DELETE FROM qm_usage_rollup WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM qm_usage_rollup WHERE minute < $1 ORDER BY minute LIMIT $2))
"""


def usage_redis_url(env: dict[str, str] | None = None) -> str | None:
    """Where the samples are: ``QM_USAGE_REDIS_URL`` (empty: nowhere), else a Redis broker."""
    env = dict(os.environ) if env is None else env
    explicit = env.get("QM_USAGE_REDIS_URL")
    if explicit is not None:
        return explicit or None
    broker = env.get("QM_BROKER_URL", "")
    return broker if broker.startswith(("redis://", "rediss://", "unix://")) else None


@dataclass
class UsageRollup:
    redis_url: str | None = None
    retention_days: float = 35.0
    batch: int = 5_000
    name: str = "usage-rollup"
    interval: float = 30.0
    usage: UsageStore | None = None  # made on the first tick from ``redis_url``
    written: datetime | None = None  # the last minute this process wrote

    @classmethod
    def from_env(cls) -> UsageRollup:
        env = os.environ.get
        return cls(
            redis_url=usage_redis_url(),
            retention_days=float(env("QM_USAGE_ROLLUP_RETENTION_DAYS", "35")),
            interval=float(env("QM_USAGE_ROLLUP_INTERVAL", "30")),
        )

    def reset(self) -> None:
        self.written = None

    def _store(self, ctx: Context) -> UsageStore | None:
        if self.usage is None and self.redis_url:
            self.usage = UsageStore(
                aioredis.Redis.from_url(self.redis_url), clock=lambda: ctx.wall().timestamp()
            )
        return self.usage

    async def tick(self, ctx: Context) -> None:
        await self.record(ctx)
        await self.prune(ctx)

    async def record(self, ctx: Context) -> int:
        """Append this minute's rows; the number of rows written (0 if already written)."""
        usage = self._store(ctx)
        if usage is None:
            return 0
        minute = minute_of(ctx.wall())
        if minute == self.written:
            return 0
        rows = rollup(await usage.pods(None), minute)
        self.written = minute
        if not rows:
            return 0
        status = await ctx.pool.execute(
            _INSERT,
            [r.minute for r in rows],
            [r.namespace for r in rows],
            [r.node for r in rows],
            [r.pods for r in rows],
            [r.cpu_milli for r in rows],
            [r.memory_bytes for r in rows],
        )
        return int(status.split()[-1])

    async def prune(self, ctx: Context) -> int:
        """Delete rows past the retention, a batch at a time (a bounded amount per tick)."""
        cutoff = ctx.wall() - timedelta(days=self.retention_days)
        removed = 0
        for _ in range(100):
            status = await ctx.pool.execute(_PRUNE, cutoff, self.batch)
            n = int(status.split()[-1])
            removed += n
            if n < self.batch:
                break
        return removed
