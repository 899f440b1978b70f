"""Garbage collection of orphans: objects every one of whose owners is gone.

Deleting an owner already deletes its dependents in the same transaction (background
propagation), waits for them (foreground, finished by the API's deletion sweeper) or strips the
reference (orphan propagation): see ``app.store.store``. What is left to collect here are
dependents that name owners which no longer exist by another road: created with a reference to
an owner that was deleted a moment before, restored from a backup, written by hand in SQL.

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
from workers.loops import Context

log = logging.getLogger(__name__)
ACTOR = "system:quaymaster-garbage-collector"
_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


def _owner_exists(ref: str) -> str:
    tables = " OR ".join(
        f"EXISTS (SELECT 1 FROM {k.table} WHERE uid = ({ref}->>'uid')::uuid)" for k in KINDS
    )
    return f"(CASE WHEN {ref}->>'uid' ~ '{_UUID}' THEN ({tables}) ELSE false END)"


def orphans_sql(kind: Kind) -> str:
    """Up to ``$1`` live objects of ``kind`` none of whose owners exist."""
    return (
        f"SELECT namespace, name, uid::text FROM {kind.table} t"
        " WHERE t.owner_references <> '[]'::jsonb AND t.deletion_timestamp IS NULL"
        " AND jsonb_typeof(t.owner_references) = 'array'"
        f" AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(t.owner_references) r"
        f" WHERE {_owner_exists('r')}) LIMIT $1"
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
                    await ctx.store.delete(
                        kind, r["namespace"], r["name"], expected_uid=r["uid"], actor=ACTOR
                    )
                    deleted += 1
                    log.info("collected orphan %s %s/%s", kind.kind, r["namespace"], r["name"])
        self._suspects = found
        return deleted
