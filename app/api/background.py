"""Loops an API server runs beside request handling.

The revisioner thread (one API server at a time holds its lock), the deletion sweeper that
finishes foreground deletions and emptied finalizers, and the slot janitor that drops replication
slots left behind by consumers that went away, so WAL cannot pile up behind them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import asyncpg

from app.store.store import Store
from app.stream.revisioner import Revisioner

log = logging.getLogger(__name__)


class RevisionerThread:
    def __init__(self, revisioner: Revisioner) -> None:
        self.revisioner = revisioner
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=revisioner.run, args=(self.stop,), daemon=True, name="revisioner"
        )

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


async def drop_abandoned_slots(pool: asyncpg.Pool, keep: str) -> list[str]:
    """Drop this database's inactive ``qm_`` slots other than the revisioner's own."""
    rows = await pool.fetch(
        "SELECT slot_name FROM pg_replication_slots WHERE NOT active"
        " AND database = current_database() AND slot_name LIKE 'qm\\_%' AND slot_name <> $1",
        keep,
    )
    dropped = []
    for r in rows:
        with contextlib.suppress(asyncpg.PostgresError):
            await pool.execute("SELECT pg_drop_replication_slot($1)", r["slot_name"])
            dropped.append(r["slot_name"])
    if dropped:
        log.warning("dropped abandoned replication slots: %s", ", ".join(dropped))
    return dropped


async def housekeeping(store: Store, revisioner: Revisioner, every_s: float = 2.0) -> None:
    """Run the leader-only housekeeping; followers idle."""
    ticks = 0
    while True:
        await asyncio.sleep(every_s)
        if not revisioner.is_leader.is_set():
            continue
        try:
            await store.sweep_deletions()
            if ticks % 30 == 0:
                await drop_abandoned_slots(store.pool, revisioner.slot or "")
        except (OSError, asyncpg.PostgresError):
            log.exception("housekeeping failed; will retry")
        ticks += 1
