"""The node proxy's Prometheus metrics (served by ``app.metrics_endpoint`` on --metrics-port).

One :class:`ProxyMetrics` per process; the forwarder, the DNS responder, the subscriber and
edge mode's health checks update it from the one event loop. Gauges that mirror state (the
version held, whether discovery is connected) are read at render time through functions.
"""

from __future__ import annotations

from app.core.metrics import Registry

# Outcomes of a new connection, the ``result`` label of qm_proxy_connections_total.
FORWARDED = "forwarded"  # an endpoint accepted it (perhaps after retries)
RETRIED = "retried"  # forwarded, but only after one or more endpoints refused
NO_ENDPOINT = "no_endpoint"  # the service has no endpoint for the port
FAILED = "failed"  # every try refused or timed out


class ProxyMetrics:
    def __init__(self) -> None:
        self.registry = r = Registry()
        self.connections = r.counter(
            "qm_proxy_connections_total",
            "New connections accepted on a service address, by service and result.",
            ["service", "result"],
        )
        self.active = r.gauge("qm_proxy_connections_active", "Connections being forwarded.")
        self.ejections = r.counter(
            "qm_proxy_ejections_total",
            "Endpoints ejected after refusing or timing out a connection, by service.",
            ["service"],
        )
        self.version_held = r.gauge("qm_proxy_version_held", "The version of the copy held.")
        self.version_acked = r.gauge(
            "qm_proxy_version_acked", "The last version acknowledged to discovery."
        )
        self.connected = r.gauge(
            "qm_proxy_discovery_connected", "1 while connected to a discovery replica."
        )
        self.listeners = r.gauge("qm_proxy_listeners", "Service addresses listened on.")
        self.services = r.gauge("qm_proxy_services", "Services in the routing table.")
        self.dns_queries = r.counter(
            "qm_proxy_dns_queries_total", "DNS queries answered, by response code.", ["rcode"]
        )
        self.healthy = r.gauge(
            "qm_proxy_edge_healthy_endpoints",
            "Edge mode: endpoints passing the edge's own health checks.",
        )
        self.checked = r.gauge(
            "qm_proxy_edge_checked_endpoints", "Edge mode: endpoints the edge health-checks."
        )

    def render(self) -> str:
        return self.registry.render()
