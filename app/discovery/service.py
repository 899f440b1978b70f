"""One discovery replica: the stream source, the subscriber port and the HTTP port together.

``run`` lists Services and EndpointSlices from the revision log, tails it (``LogInformer``,
the scheduler's and the dispatcher's reader) and feeds each batch to the hub, lists again when
the log was compacted past it, and retries while PostgreSQL is away: subscribers keep what
they have and the replica catches up when the stream returns. The HTTP port answers
``/healthz``, ``/metrics``, ``/v1/subscribers`` and ``/v1/drained`` (the node agent's question
before it sends SIGTERM to a terminating pod: ADR 0041).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from app.core.errors import Gone
from app.core.metrics import escape_label_value, format_value
from app.core.traffic import protocol
from app.discovery import metrics
from app.discovery.hub import PING_EVERY, ChangedSince, Hub, Subscriber
from app.metrics_endpoint import JSON, Route, serve
from app.stream.informer import LogInformer

log = logging.getLogger(__name__)

KINDS = ("Service", "EndpointSlice")
RETRY = 1.0
DRAIN_POLL = 0.02
MAX_DRAIN_WAIT = 60.0
MAX_RESUME_SPAN = 2_000_000  # revisions; further back, a snapshot is cheaper than the scan


@dataclass(frozen=True)
class Settings:
    dsn: str
    host: str = "127.0.0.1"
    port: int = 9470
    http_host: str = "127.0.0.1"
    http_port: int = 9480


async def follow(hub: Hub, informer: LogInformer, stop: asyncio.Event) -> None:
    """Keep the hub's state current from the revision log until ``stop``."""
    while not stop.is_set():
        try:
            version, items = await informer.list()
        except Exception as exc:  # the database is away: subscribers keep their copies
            log.warning("discovery could not list Services and EndpointSlices (%s)", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RETRY)
            continue
        hub.load(version, items)
        log.info("discovery loaded %d objects at revision %d", len(items), version)
        batches = informer.changes(version)
        try:
            async for batch in batches:
                hub.apply(batch)
                if stop.is_set():
                    return
        except Gone as exc:
            log.warning("discovery fell behind the log (%s); listing again", exc)
        finally:
            await batches.aclose()  # type: ignore[attr-defined]


def changed_since(informer: LogInformer) -> ChangedSince:
    """The services whose Service or EndpointSlices changed in a range of revisions, from the
    revision log (None when compaction dropped part of it, or the range is too long)."""

    async def services(since: int, upto: int) -> set[str] | None:
        if upto - since > MAX_RESUME_SPAN:
            return None
        try:
            touched = await informer.touched(since, upto)
        except Gone:
            return None
        out = set()
        for kind, namespace, name, labels in touched:
            service = name if kind == "Service" else labels.get("kubernetes.io/service-name")
            if service:
                out.add(protocol.service_key(namespace, service))
        return out

    return services


async def _pinger(hub: Hub, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PING_EVERY)
        hub.ping()


def routes(hub: Hub, clock: Callable[[], float] = time.monotonic) -> dict[str, Route]:
    """The HTTP paths besides ``/metrics`` and ``/healthz``."""

    async def subscribers(_: dict[str, str]) -> tuple[int, str, bytes]:
        body = {
            "version": hub.state.version,
            "subscribers": [asdict(lag) for lag in hub.lags()],
        }
        return 200, JSON, json.dumps(body).encode()

    async def drained(query: dict[str, str]) -> tuple[int, str, bytes]:
        namespace, pod = query.get("namespace", ""), query.get("pod", "")
        try:
            timeout = min(max(float(query.get("timeout", "0")), 0.0), MAX_DRAIN_WAIT)
        except ValueError:
            timeout = -1.0
        if not namespace or not pod or timeout < 0:
            problem = "namespace, pod and a numeric timeout (seconds) are required"
            return 422, JSON, json.dumps({"error": problem}).encode()
        deadline = clock() + timeout
        while True:
            done, version, waiting = hub.drained(namespace, pod)
            if done or clock() >= deadline:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hub.changed.wait(), DRAIN_POLL)
        body = {"drained": done, "version": version, "waiting": waiting[:100]}
        return 200, JSON, json.dumps(body).encode()

    return {"/v1/subscribers": subscribers, "/v1/drained": drained}


def render(hub: Hub) -> str:
    """The registry's metrics and each subscriber's acknowledged version and lag."""
    lines = [metrics.REGISTRY.render().rstrip("\n")]
    lines.append(
        "# HELP qm_discovery_subscriber_acked_version The last version a subscriber acknowledged."
    )
    lines.append("# TYPE qm_discovery_subscriber_acked_version gauge")
    lags = hub.lags()
    for lag in lags:
        lines.append(
            f'qm_discovery_subscriber_acked_version{{subscriber="{escape_label_value(lag.id)}"}}'
            f" {lag.acked}"
        )
    lines.append(
        "# HELP qm_discovery_subscriber_lag_seconds"
        " How long a subscriber has not held the newest version."
    )
    lines.append("# TYPE qm_discovery_subscriber_lag_seconds gauge")
    for lag in lags:
        lines.append(
            f'qm_discovery_subscriber_lag_seconds{{subscriber="{escape_label_value(lag.id)}"}}'
            f" {format_value(lag.lag_seconds)}"
        )
    return "\n".join(lines) + "\n"


async def run(settings: Settings, stop: asyncio.Event) -> None:
    """Serve until ``stop``."""
    loop = asyncio.get_running_loop()
    hub = Hub(time.monotonic, changed_since(LogInformer(settings.dsn, KINDS)))
    stream = await loop.create_server(lambda: Subscriber(hub), settings.host, settings.port,
                                      backlog=65535)  # fmt: skip
    http = await serve(
        settings.http_host,
        settings.http_port,
        lambda: render(hub),
        lambda: hub.loaded,
        routes(hub),
        read_timeout=MAX_DRAIN_WAIT + 5,
    )
    log.info("discovery serving subscribers on %s:%d, HTTP on %s:%d", settings.host,
             settings.port, settings.http_host, settings.http_port)  # fmt: skip
    tasks = [
        asyncio.ensure_future(follow(hub, LogInformer(settings.dsn, KINDS), stop)),
        asyncio.ensure_future(_pinger(hub, stop)),
    ]
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stream.close()
        http.close()
        for sub in list(hub.subscribers.values()):
            if sub.transport is not None:
                sub.transport.close()
