"""API priority and fairness, the shell around :mod:`app.core.fairness` (ADR 0049).

Who calls it: :func:`app.api.routes.as_user` takes a seat with :func:`seat` around every
authenticated handler (the Litestar routes and the fast path of :mod:`app.api.fastpath`
alike); :class:`FairShare` wraps the whole ASGI app so that :func:`seat` knows the request it
is counting (its path and query give the list's cost); :func:`fairness_lifespan` builds the
:class:`FlowControl` and runs the heartbeat that divides the cluster's seats among the live
API servers; ``/metrics`` prints :func:`metric_lines`.

A request over its flow's share waits on a future until the dispatcher admits it, at most the
queue wait limit; then, or at once when its queue is full, it is refused with 429 and
``Retry-After``. A flow held back by its rate limit (while another flow uses the server) has
no release to wake it: a timer at :meth:`~app.core.fairness.Dispatcher.next_tick` does. A
waiting request also looks again every ``RECHECK_S`` on its own, so a wake-up that never
comes costs a quarter second, not the whole queue wait. A
refusal the dispatcher marks ``paced`` (a full queue while over the rate) is answered only
after its ``Retry-After``. A watch or a log follow holds its seat only while its handler
starts the stream (:func:`as_user` returns the streaming response at once), which is how
watches "count when they start".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qs

import asyncpg
from litestar import Litestar

from app.core import fairness as core
from app.core.errors import TooManyRequests
from app.core.kinds import API_VERSION, BY_PLURAL
from app.store import apiservers
from app.store.db import create_pool, database_url
from app.store.tokens import User
from app.stream.cache import WatchCache

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
RETRY_AFTER_S = 1
# A waiting request looks again this often whether it was woken or not: the timer and the
# wake-ups are the fast path, this is the floor under them.
RECHECK_S = 0.25
_COLLECTION = re.compile(
    "^/apis/" + re.escape(API_VERSION) + r"/(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[^/]+)$"
)


def env_config(env: MutableMapping[str, str] | None = None) -> tuple[int, core.Config, float]:
    """(the cluster's seats, queue settings, heartbeat seconds) from the environment."""
    e = os.environ if env is None else env
    config = core.Config(
        queue_length=int(e.get("QM_API_QUEUE_LENGTH", "50")),
        max_queued=int(e.get("QM_API_MAX_QUEUED", "1000")),
        wait_limit=float(e.get("QM_API_QUEUE_WAIT_S", "5")),
        rate_per_seat=float(e.get("QM_API_FLOW_RATE", "1")),
    )
    return int(e.get("QM_API_SEATS", "400")), config, float(e.get("QM_API_HEARTBEAT_S", "2"))


def request_seats(scope: Scope, cache: WatchCache | None, long_running: bool) -> int:
    """Seats of the request ``scope``: a list one per 100 objects it may return (counted in
    the cache for its namespace or the whole kind, bounded by ``limit``); everything else,
    including a watch or a follow while it starts (``long_running``), one."""
    if long_running or cache is None or scope.get("method") != "GET":
        return 1
    m = _COLLECTION.match(scope.get("path", ""))
    kind = BY_PLURAL.get(m["plural"]) if m else None
    if m is None or kind is None:
        return 1
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    if query.get("watch", [""])[0] not in ("", "0", "false", "False"):
        return 1
    objects = cache.objects.get(kind.kind)  # kinds outside the stream are not counted
    if objects is None:
        return 1
    if m["ns"] and kind.namespaced:
        n = objects.bisect_right((m["ns"], "\U0010ffff")) - objects.bisect_left((m["ns"], ""))
    else:
        n = len(objects)
    limit = query.get("limit", [""])[0]
    return core.list_seats(n, int(limit) if limit.isdigit() else None)


class FlowControl:
    """One server's dispatcher, with a future per waiting request."""

    def __init__(self, total_seats: int, config: core.Config, cache: WatchCache | None) -> None:
        self.total_seats = total_seats
        self.servers = 1
        self.cache = cache
        self.dispatcher = core.Dispatcher(core.seat_limits(total_seats, 1), config)
        self._waiting: dict[core.Request, asyncio.Future[None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.pace: Callable[[float], Awaitable[None]] = asyncio.sleep  # tests replace it

    def set_servers(self, servers: int) -> None:
        if servers != self.servers:
            log.info("%d API servers share the seats", servers)
            self.servers = servers
            self._wake(self.dispatcher.set_limits(core.seat_limits(self.total_seats, servers)))

    @contextlib.asynccontextmanager
    async def seat(self, user: User, seats: int) -> AsyncIterator[None]:
        """Hold ``seats`` of ``user``'s level for the block, waiting for them if need be."""
        loop = asyncio.get_running_loop()
        level, flow = core.classify(user.name, user.groups)
        req = self.dispatcher.offer(level, flow, seats, loop.time())
        self._wake(self.dispatcher.admitted_in_passing())
        if req.state == "queued":
            self._arm()
            await self._wait(req)
        if req.state != "admitted":
            if req.paced:  # over its rate: answer when it may retry, not at once
                await self.pace(RETRY_AFTER_S)
            raise TooManyRequests(
                f"too many requests from {flow} at priority level {level} "
                f"({'its queue is full' if req.reason == core.QUEUE_FULL else 'waited too long'});"
                " retry shortly",
                retry_after=RETRY_AFTER_S,
            )
        try:
            yield
        finally:
            self._wake(self.dispatcher.release(req, loop.time()))

    async def _wait(self, req: core.Request) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting[req] = fut
        try:
            while req.state == "queued":
                left = req.arrived + self.dispatcher.config.wait_limit - loop.time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), min(max(left, 0.001), RECHECK_S))
                if req.state == "queued":  # a missed wake-up costs at most RECHECK_S
                    self._wake(self.dispatcher.tick(loop.time()))
                if (
                    req.state == "queued"
                    and loop.time() >= req.arrived + self.dispatcher.config.wait_limit
                ):
                    self._wake(self.dispatcher.expire(loop.time()))
        except BaseException:  # cancelled: the client went away while waiting or admitted
            self._wake(self.dispatcher.cancel(req, loop.time()))
            raise
        finally:
            self._waiting.pop(req, None)

    def _wake(self, requests: list[core.Request]) -> None:
        for req in requests:
            fut = self._waiting.get(req)
            if fut is not None and not fut.done():
                fut.set_result(None)
        if self._waiting:
            self._arm()

    def _arm(self) -> None:
        """Keep a timer at the time a request held back by its flow's rate may run."""
        loop = asyncio.get_running_loop()
        at = self.dispatcher.next_tick(loop.time())
        if at is None or (self._timer is not None and self._timer.when() <= at):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(at, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._wake(self.dispatcher.tick(asyncio.get_running_loop().time()))


# The request being served, set by FairShare for the handler's task.
_CURRENT: ContextVar[tuple[FlowControl, Scope] | None] = ContextVar("qm_fair_share", default=None)


@contextlib.asynccontextmanager
async def seat(user: User, long_running: bool = False) -> AsyncIterator[None]:
    """The current request's seats for the block (nothing outside :class:`FairShare`)."""
    current = _CURRENT.get()
    if current is None:
        yield
        return
    control, scope = current
    async with control.seat(user, request_seats(scope, control.cache, long_running)):
        yield


class FairShare:
    """ASGI wrapper: makes each HTTP request's scope known to :func:`seat`."""

    def __init__(self, app: ASGIApp, litestar: Litestar) -> None:
        self.app = app
        self.litestar = litestar

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        control = self.litestar.state.get("fairness") if scope["type"] == "http" else None
        if control is None:
            await self.app(scope, receive, send)
            return
        token = _CURRENT.set((control, scope))
        try:
            await self.app(scope, receive, send)
        finally:
            _CURRENT.reset(token)


async def _heartbeat(pool: asyncpg.Pool, control: FlowControl, every_s: float) -> None:
    """Count the live servers every ``every_s`` seconds; forget idle flows."""
    server_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                control.set_servers(await apiservers.heartbeat(pool, server_id, every_s * 3))
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("API server heartbeat failed (keeping %d): %s", control.servers, exc)
            control.dispatcher.prune(loop.time())
            await asyncio.sleep(every_s)
    finally:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            await apiservers.leave(pool, server_id)


@contextlib.asynccontextmanager
async def fairness_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Flow control for ``app`` (after the main lifespan: it counts lists in its cache)."""
    total, config, every_s = env_config()
    control = FlowControl(total, config, app.state.objects.cache)
    pool = await create_pool(database_url(), min_size=1, max_size=1)
    beat = asyncio.create_task(_heartbeat(pool, control, every_s))
    app.state.fairness = control
    try:
        yield
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
        await pool.close()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metric_lines(control: FlowControl | None) -> list[str]:
    """Prometheus text: seats, queues and refusals per level and per flow."""
    if control is None:
        return []
    out = ["# TYPE qm_apf_api_servers gauge", f"qm_apf_api_servers {control.servers}"]
    levels = control.dispatcher.levels.values()
    for name, kind, value in (
        ("seats_limit", "gauge", lambda lv: lv.limit),
        ("seats_in_use", "gauge", lambda lv: lv.in_use),
        ("queued", "gauge", lambda lv: lv.queued),
        ("dispatched_total", "counter", lambda lv: lv.dispatched),
        ("flow_rate_limit", "gauge", lambda lv: f"{control.dispatcher.rate(lv):g}"),
    ):
        out.append(f"# TYPE qm_apf_level_{name} {kind}")
        out += [f'qm_apf_level_{name}{{level="{lv.name}"}} {value(lv)}' for lv in levels]
    out.append("# TYPE qm_apf_level_rejected_total counter")
    for lv in levels:
        out += [f'qm_apf_level_rejected_total{{level="{lv.name}",reason="{r}"}} {n}'
                for r, n in lv.rejected.items()]  # fmt: skip
    for name, kind, fvalue in (
        ("seats_in_use", "gauge", lambda f: f.in_use),
        ("queued", "gauge", lambda f: len(f.queue)),
        ("dispatched_total", "counter", lambda f: f.dispatched),
        ("rejected_total", "counter", lambda f: f.rejected),
    ):
        out.append(f"# TYPE qm_apf_flow_{name} {kind}")
        for lv in levels:
            out += [f'qm_apf_flow_{name}{{level="{lv.name}",flow="{_label(k)}"}} {fvalue(f)}'
                    for k, f in lv.flows.items()]  # fmt: skip
    return out
