"""Edge mode: the proxy as the load balancer of LoadBalancer services (ADR 0040).

``python -m agent.proxy --edge --listen ADDR`` subscribes with scope ``exposed`` (only
LoadBalancer services and their endpoints), listens on ``ADDR:<port>`` in the host namespace
for every port of those services, and chooses endpoints by its own TCP health checks as well
as discovery's readiness (:func:`agent.proxy.table.edge_tiers`). :func:`check_forever` runs
the checks: every ``interval`` seconds a connect to each endpoint port, at most ``timeout``
seconds each, all at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from agent.proxy.forward import Sockets
from agent.proxy.health import HealthBook
from agent.proxy.metrics import ProxyMetrics
from agent.proxy.table import Endpoint, Service, Table, Target, Tiers, edge_tiers
from app.process import Wait, wait_or_stop

log = logging.getLogger(__name__)


def tiers(book: HealthBook, fail_open: float) -> Tiers:
    """The edge's choice of endpoints for a service port, by ``book``'s results."""

    def of(service: Service, port_name: str) -> list[list[Endpoint]]:
        def healthy(e: Endpoint) -> bool:
            return book.healthy(e.target(port_name))

        return edge_tiers(service.endpoints, healthy, fail_open)

    return of


def targets(table: Table) -> set[Target]:
    """Every endpoint port of every LoadBalancer service's ports."""
    out: set[Target] = set()
    for service in table.services.values():
        if service.type != "LoadBalancer":
            continue
        for port in service.ports:
            for e in service.endpoints:
                if (t := e.target(port.name)) is not None:
                    out.add(t)
    return out


async def probe(sockets: Sockets, target: Target, timeout: float) -> bool:
    try:
        sock = await asyncio.wait_for(sockets.connect(*target), timeout)
    except (OSError, TimeoutError):
        return False
    sock.close()
    return True


async def check_forever(
    table: Table,
    book: HealthBook,
    sockets: Sockets,
    interval: float,
    stop: asyncio.Event,
    metrics: ProxyMetrics,
    *,
    on_round: Callable[[], None] = lambda: None,
    wait: Wait = wait_or_stop,
) -> None:
    """Check every endpoint port every ``interval`` seconds until ``stop``."""
    timeout = min(1.0, interval)
    while not stop.is_set():
        wanted = sorted(targets(table))
        book.keep(wanted)
        results = await asyncio.gather(*(probe(sockets, t, timeout) for t in wanted))
        for target, ok in zip(wanted, results, strict=True):
            was = book.healthy(target)
            if book.record(target, ok) != was:
                log.info("edge: %s:%s is now %s", *target, "healthy" if not was else "unhealthy")
        healthy, checked = book.counts()
        metrics.healthy.set(healthy)
        metrics.checked.set(checked)
        with contextlib.suppress(Exception):
            on_round()
        await wait(stop, interval)
