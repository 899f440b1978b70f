"""The controller manager: ``python -m workers.manager`` runs the singleton loops (node
lifecycle, garbage collection, Event retention) while it holds the Lease
``quaymaster-system/quaymaster-controller-manager``.

Run two or more for availability: one leads, the others keep trying to take the lease (see
``app.store.lease``). Per-key reconciles do not need this (the Celery workers' per-key locks
serialise them); loops that look at the whole cluster at once do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import asyncpg

from app.process import Wait, configure_logging, run_until_stopped, wait_or_stop
from app.store.db import create_pool, database_url
from app.store.lease import LeaderLease
from app.store.schema_revision import require_known_schema
from app.store.store import Store
from workers import metrics
from workers.context import reconciling
from workers.loops import Context, Loop

log = logging.getLogger(__name__)
LEASE_NAME = "quaymaster-controller-manager"


def _wall() -> datetime:
    return datetime.now(UTC)


class Manager:
    """Drives the loops while the lease is held. The clocks (``monotonic``, ``wall``) and the
    wait between ticks are injected so that tests drive the manager on a fake clock."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        loops: Sequence[Loop],
        lease: LeaderLease,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = _wall,
        wait: Wait = wait_or_stop,
    ) -> None:
        self.pool = pool
        self.loops = list(loops)
        self.lease = lease
        self.ctx = Context(pool, Store(pool), monotonic, wall)
        self._wait = wait
        self.term = 0  # bumped on every gain or loss of leadership

    def _on_change(self, leading: bool) -> None:
        self.term += 1
        metrics.LEADING.set(1.0 if leading else 0.0)

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self.lease.run(stop, self._on_change))]
        tasks += [asyncio.create_task(self._drive(loop, stop)) for loop in self.loops]
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            with contextlib.suppress(Exception):
                await self.lease.release()

    async def _drive(self, loop: Loop, stop: asyncio.Event) -> None:
        """Tick ``loop`` every ``interval`` while leading; reset it on every change of term, even
        one that lost and regained leadership between two ticks."""
        term, leading = -1, False
        while not stop.is_set():
            now_leading = self.lease.is_leader()
            if self.term != term or now_leading != leading:
                loop.reset()
                term, leading = self.term, now_leading
            if leading:
                started = self.ctx.monotonic()
                try:
                    with reconciling():  # one request id per pass, in the history
                        await loop.tick(self.ctx)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    metrics.TICK_ERRORS.labels(loop.name).inc()
                    log.warning("loop %s: %s; retrying", loop.name, exc)
                except Exception:
                    metrics.TICK_ERRORS.labels(loop.name).inc()
                    log.exception("loop %s failed; retrying", loop.name)
                took = self.ctx.monotonic() - started
                metrics.TICKS.labels(loop.name).observe(took)
                if took > loop.interval:
                    log.info("loop %s took %.2fs (interval %.2fs)", loop.name, took, loop.interval)
            await self._wait(stop, loop.interval)


def default_loops() -> list[Loop]:
    """Every singleton loop, configured from the environment."""
    from workers.loops import registry

    return registry.build()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers.manager", description=__doc__)
    parser.add_argument(
        "--identity",
        default=os.environ.get("QM_MANAGER_IDENTITY")
        or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
    )
    parser.add_argument(
        "--lease-duration", type=float, default=float(os.environ.get("QM_MANAGER_LEASE", "15"))
    )
    parser.add_argument(
        "--lease-renew", type=float, default=float(os.environ.get("QM_MANAGER_RENEW", "3"))
    )
    args = parser.parse_args(argv)
    configure_logging()
    require_known_schema(database_url(), "the controller manager")

    async def go(stop: asyncio.Event) -> None:
        pool = await create_pool(database_url(), min_size=1, max_size=4)
        await metrics.serve_registry("QM_MANAGER_METRICS_PORT", metrics.MANAGER)
        lease = LeaderLease(
            pool,
            args.identity,
            name=LEASE_NAME,
            duration=args.lease_duration,
            renew_every=args.lease_renew,
        )
        try:
            await Manager(pool, default_loops(), lease).run(stop)
        finally:
            await pool.close()

    run_until_stopped(go)


if __name__ == "__main__":
    main()
