"""Repair of leaked Service virtual IP allocations, every minute, in the controller manager.

The database allocates and releases a Service's address in the same transaction as the write
(migration 0007), so the table and the services agree whenever the triggers ran. They do not
run for rows written with triggers disabled (``session_replication_role = replica``, a
restore), after a ``TRUNCATE services``, or for services older than that migration; this loop
calls ``qm_repair_service_ips()``, which releases addresses held for services that are gone,
claims the addresses services name without a row, counts addresses two services name (only a
person can choose which keeps it) and purges rows whose quarantine is over. A singleton loop
(ADR 0036): the repair is one statement set over two whole tables, with no key to shard on.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from workers.loops import Context

log = logging.getLogger(__name__)

REPAIR = "SELECT released, restored, duplicates, purged FROM qm_repair_service_ips()"


@dataclass(frozen=True)
class Repair:
    """What one pass changed: addresses released (their service gone), rows restored (a
    service naming an address no row held for it), addresses two services name, and
    quarantined rows purged."""

    released: int = 0
    restored: int = 0
    duplicates: int = 0
    purged: int = 0


def report(repair: Repair) -> tuple[int, str] | None:
    """The log level and line a pass deserves: a warning for a leak found or a duplicate
    address, nothing for a pass that only purged (the normal end of a quarantine)."""
    if repair.duplicates:
        return logging.WARNING, (
            f"{repair.duplicates} service(s) name a virtual IP another service holds; "
            "give one of them a new address (released "
            f"{repair.released}, restored {repair.restored})"
        )
    if repair.released or repair.restored:
        return logging.WARNING, (
            f"repaired leaked service IP allocations: released {repair.released} held for "
            f"services that are gone, restored {repair.restored} for services without one"
        )
    return None


@dataclass
class ServiceIpRepair:
    name: str = "service-ips"
    interval: float = 60.0

    @classmethod
    def from_env(cls) -> ServiceIpRepair:
        return cls(interval=float(os.environ.get("QM_SERVICE_IP_REPAIR_INTERVAL", "60")))

    def reset(self) -> None:
        return None

    async def tick(self, ctx: Context) -> None:
        await self.repair(ctx)

    async def repair(self, ctx: Context) -> Repair:
        """One pass of ``qm_repair_service_ips()``; what it changed."""
        rec = await ctx.pool.fetchrow(REPAIR)
        done = Repair(**dict(rec)) if rec is not None else Repair()
        line = report(done)
        if line is not None:
            log.log(line[0], "%s", line[1])
        return done
