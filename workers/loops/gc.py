"""The cluster-wide scan for orphans: objects every one of whose owners is gone.

The garbage collector controller (``workers/controllers/garbage.py``) follows owners it sees
go in the revision stream and deletes their dependents in batches. This scan is its safety net
for what the stream cannot show it: dependents created with a reference to an owner deleted a
moment before, owners deleted while no dispatcher was running (a relist shows only what is
alive), rows restored from a backup or written by hand in SQL. It stays a singleton loop rather
than a keyed controller because it has no key: it is one query over every table, with memory
across passes (ADR 0032).

An object is collected only when it was found ownerless on two passes in a row, so a dependent
whose owner is being created in a concurrent transaction is never mistaken for an orphan.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field

from app.core import errors
from app.core.kinds import KINDS, Kind
from app.store.sql import owner_exists
from workers.context import write_context
from workers.controllers.garbage import NAME
from workers.loops import Context

log = logging.getLogger(__name__)


def orphans_sql(kind: Kind) -> str:
    """Up to ``$1`` live objects of ``kind`` none of whose owners exist."""
    return (
        f"SELECT namespace, name, uid::text FROM {kind.table} t"
        " WHERE t.owner_references <> '[]'::jsonb AND t.deletion_timestamp IS NULL"
        " AND jsonb_typeof(t.owner_references) = 'array'"
        f" AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(t.owner_references) r"
        f" WHERE {owner_exists('r')}) LIMIT $1"
    )


@dataclass
class OrphanCollector:
    per_pass: int = 1000
    name: str = "garbage-collector"
    interval: float = 30.0
    _suspects: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def from_env(cls) -> OrphanCollector:
        return cls(interval=float(os.environ.get("QM_GC_INTERVAL", "30")))

    def reset(self) -> None:
        self._suspects = set()

    async def tick(self, ctx: Context) -> None:
        await self.collect(ctx)

    async def collect(self, ctx: Context) -> int:
        """One pass: delete the orphans also seen on the previous pass; the number deleted."""
        found: set[tuple[str, str]] = set()
        deleted = 0
        for kind in KINDS:
            for r in await ctx.pool.fetch(orphans_sql(kind), self.per_pass):
                key = (kind.kind, r["uid"])
                found.add(key)
                if key not in self._suspects:
                    continue
                with contextlib.suppress(errors.NotFound, errors.Conflict):
                    why = write_context(NAME, "orphan: no owner it names exists")
                    await ctx.store.delete(
                        kind, r["namespace"], r["name"], expected_uid=r["uid"], ctx=why
                    )
                    deleted += 1
                    log.info("collected orphan %s %s/%s", kind.kind, r["namespace"], r["name"])
        self._suspects = found
        return deleted
