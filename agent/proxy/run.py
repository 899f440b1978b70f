"""One node proxy process: the subscriber, table, forwarder, DNS responder and metrics wired.

``python -m agent.proxy`` (``__main__``) parses its settings and runs :class:`Proxy` until
SIGTERM; the integration tests run :class:`Proxy` in their own loop. Start-up order matters
for static stability: the copy saved by the last run is loaded and routed by *before* the
first attempt to reach discovery, so a proxy restarted while discovery is down forwards at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Sequence

import uvloop

from agent.netns import NamespaceSockets
from agent.proxy import config as proxy_config
from agent.proxy import edge
from agent.proxy.config import ProxyConfig
from agent.proxy.dns import DnsServer
from agent.proxy.forward import Forwarder
from agent.proxy.health import HealthBook
from agent.proxy.metrics import ProxyMetrics
from agent.proxy.subscriber import CopyFile, Subscriber, keep_saved
from agent.proxy.table import Ejections, Picker, Table, node_tiers
from app import metrics_endpoint
from app.core.traffic.protocol import SERVICE, Applied
from app.process import configure_logging, die_with_parent_if_asked, run_until_stopped

log = logging.getLogger(__name__)


class Proxy:
    def __init__(
        self,
        config: ProxyConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.metrics = ProxyMetrics()
        self.table = Table()
        self.copy = CopyFile(config.state_dir / "copy.json")
        self.sockets = NamespaceSockets(config.netns)
        self.host_sockets = NamespaceSockets(None)
        self.book = HealthBook()
        tiers = (
            edge.tiers(self.book, config.fail_open)
            if config.edge
            else lambda service, _port: node_tiers(service.endpoints, config.zone)
        )
        self.picker = Picker(tiers, Ejections(), rng)
        self.forwarder = Forwarder(
            self.table,
            self.picker,
            self.host_sockets if config.edge else self.sockets,
            self.sockets,
            self.metrics,
            clock=clock,
        )
        replica = self.copy.load()
        self.subscriber = Subscriber(
            config.discovery,
            config.ident,
            replica,
            self._changed,
            node=config.node_name,
            zone=config.zone,
            scope=config.scope,
            silence=config.discovery_timeout,
        )
        self.dns: DnsServer | None = None
        self.metrics_server: asyncio.base_events.Server | None = None
        m = self.metrics
        m.version_held.set_function(lambda: float(self.subscriber.replica.version))
        m.version_acked.set_function(lambda: float(self.subscriber.acked))
        m.connected.set_function(lambda: float(self.subscriber.connected))
        m.services.set_function(lambda: float(len(self.table.services)))
        self._changed(Applied(changed=set(), reset=True))  # route by the saved copy at once

    def _routes(self) -> dict[tuple[str, int], tuple[str, str]]:
        if self.config.edge:
            return self.table.load_balancer_ports(self.config.listen)
        return self.table.vips()

    def _changed(self, applied: Applied) -> None:
        """A message changed the replica: update the table (before the ACK goes out)."""
        invalid = len(self.table.invalid)
        self.table.update(self.subscriber.replica.resources, applied.changed, applied.reset)
        if len(self.table.invalid) > invalid:
            log.warning("unreadable resources skipped: %s", sorted(self.table.invalid)[:10])
        if applied.reset or any(k.startswith(SERVICE + "/") for k in applied.changed):
            self.forwarder.want(self._routes())
            self.picker.keep(self.table.services)

    async def start(self) -> None:
        """Everything that listens: the namespace, DNS and metrics."""
        await self.sockets.start()
        if self.config.dns is not None:
            queries = self.metrics.dns_queries
            self.dns = DnsServer(self.table, lambda rcode: queries.labels(rcode).inc())
            await self.dns.start(self.sockets, *self.config.dns)
        if self.config.metrics_port is not None:
            self.metrics_server = await metrics_endpoint.serve(
                self.config.metrics_address, self.config.metrics_port, self.metrics.render
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop``."""
        await self.start()
        tasks = [
            asyncio.ensure_future(self.forwarder.run(stop)),
            asyncio.ensure_future(self.subscriber.run(stop)),
            asyncio.ensure_future(keep_saved(self.copy, self.subscriber, stop)),
        ]
        if self.config.edge:
            tasks.append(
                asyncio.ensure_future(
                    edge.check_forever(
                        self.table,
                        self.book,
                        self.sockets,
                        self.config.health_interval,
                        stop,
                        self.metrics,
                    )
                )
            )
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            self.close()

    def close(self) -> None:
        self.forwarder.close()
        if self.dns is not None:
            self.dns.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.sockets.close()

    @property
    def metrics_port(self) -> int:
        assert self.metrics_server is not None
        return int(self.metrics_server.sockets[0].getsockname()[1])


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging(default="info")
    die_with_parent_if_asked()
    try:
        config = proxy_config.parse(sys.argv[1:] if argv is None else argv, os.environ)
    except proxy_config.ConfigError as exc:
        print(f"agent.proxy: {exc}", file=sys.stderr)
        return 2
    uvloop.install()  # the data path's accepts, reads and writes in libuv (ADR 0040)
    proxy = Proxy(config)
    log.info(
        "node proxy %s (zone %r, %s) subscribing to %s",
        config.ident,
        config.zone,
        f"netns {config.netns}" if config.netns else "host network",
        ",".join(f"{h}:{p}" for h, p in config.discovery),
    )
    with contextlib.suppress(KeyboardInterrupt):
        run_until_stopped(proxy.run)
    return 0
