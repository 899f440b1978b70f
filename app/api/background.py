"""What an API server runs beside request handling.

A revisioner child process (every API server starts one; one at a time holds the lock, the
others are hot standbys), and the leader-only housekeeping: the slot janitor that drops
replication slots left behind by consumers that went away, so WAL cannot pile up behind them.
Deletions that wait (foreground owners, emptied finalizers, namespaces being deleted) are
finished by the garbage collector and namespace controllers (``workers/controllers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys

import asyncpg

from app.store.store import Store
from app.store.tokens import purge as purge_tokens
from app.stream.revisioner import slot_name

log = logging.getLogger(__name__)


class RevisionerProcess:
    """``python -m app.stream`` as a child of this server, stopped with it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.environ.get("QM_REVISIONER", "embedded") == "external":
            return
        env = {**os.environ, "QM_DIE_WITH_PARENT": "1", "QM_PARENT_PID": str(os.getpid())}
        self.proc = subprocess.Popen([sys.executable, "-m", "app.stream"], env=env)

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def ensure(self) -> None:
        """Start a new child if the last one died (it never should; it retries internally)."""
        if self.proc is not None and self.proc.poll() is not None:
            log.error("the revisioner exited with %s; starting another", self.proc.returncode)
            self.start()

    def close(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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


HOUSEKEEPING_LOCK = 0x716D_686B_7000  # "qmhk"


async def housekeeping(
    store: Store, dsn: str, revisioner: RevisionerProcess, every_s: float = 2.0
) -> None:
    """Keep the revisioner child alive (checked every ``every_s``); run the leader-only slot
    janitor and purge long-dead token records about once a minute (leader: whoever holds the
    session lock); others idle."""
    ticks = 0
    conn: asyncpg.Connection | None = None
    while True:
        await asyncio.sleep(every_s)
        revisioner.ensure()
        try:
            if conn is None or conn.is_closed():
                conn = await asyncpg.connect(dsn, statement_cache_size=0)
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", HOUSEKEEPING_LOCK):
                continue
            if ticks % 30 == 0:
                name = slot_name(await conn.fetchval("SELECT current_database()"))
                await drop_abandoned_slots(store.pool, name)
                await purge_tokens(store.pool)
            ticks += 1
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            log.exception("housekeeping failed; will retry")
