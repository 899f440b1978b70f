"""Event retention: Events older than a time to live are deleted, and the table is held under a
cap, so it cannot grow without bound however busy the cluster is.

Deduplication (``app.store.events``) already folds repeats into one row per object and reason;
this loop bounds what remains. Deletes go in small batches (oldest first) so a backlog never
becomes one long transaction. Events bypass the audit trail on purpose: they are a
diagnostic, not a record of intent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workers.loops import Context

# lastTimestamp as a timestamp; an unreadable one counts as old.
_LAST = """coalesce(CASE WHEN spec->>'lastTimestamp' ~ '^\\d{4}-\\d\\d-\\d\\dT'
  THEN (spec->>'lastTimestamp')::timestamptz END, '-infinity'::timestamptz)"""

_EXPIRED = f"""
DELETE FROM events WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM events WHERE {_LAST} < now() - make_interval(secs => $1) LIMIT $2))
"""

_OVER_CAP = f"""
DELETE FROM events WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM events ORDER BY {_LAST}
  LIMIT least(greatest((SELECT count(*) FROM events) - $1::bigint, 0), $2::bigint)))
"""


@dataclass
class EventRetention:
    ttl_seconds: float = 7 * 86400.0  # a week: an hour (Kubernetes') loses the evidence
    max_events: int = 200_000
    batch: int = 5_000
    name: str = "event-retention"
    interval: float = 30.0

    @classmethod
    def from_env(cls) -> EventRetention:
        return cls(
            ttl_seconds=float(os.environ.get("QM_EVENT_TTL_SECONDS", "604800")),
            max_events=int(os.environ.get("QM_EVENT_MAX", "200000")),
            interval=float(os.environ.get("QM_EVENT_RETENTION_INTERVAL", "30")),
        )

    def reset(self) -> None:
        return None

    async def tick(self, ctx: Context) -> None:
        await self.sweep(ctx)

    async def sweep(self, ctx: Context) -> int:
        """Delete expired Events, then the oldest beyond the cap; the number removed."""
        removed = 0
        for _ in range(100):  # a bounded amount of work per tick
            status = await ctx.pool.execute(_EXPIRED, self.ttl_seconds, self.batch)
            n = int(status.split()[-1])
            removed += n
            if n < self.batch:
                break
        for _ in range(100):
            status = await ctx.pool.execute(_OVER_CAP, self.max_events, self.batch)
            n = int(status.split()[-1])
            removed += n
            if n < self.batch:
                break
        return removed
