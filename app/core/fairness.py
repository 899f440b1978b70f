"""API priority and fairness: the queuing arithmetic, pure (ADR 0049).

Who calls it: :mod:`app.api.fairness`, the shell that turns these decisions into waiting
requests, 429s and metrics. Nothing here reads a clock, sleeps or does I/O: ``now`` is passed
in, so the tests run on a fake clock.

The model is Kubernetes' API Priority and Fairness, simplified where the difference buys
nothing at our scale:

* a request's principal picks a **priority level** (:func:`classify`); each level owns a share
  of the API's concurrency (its *seats*), and one level's traffic never takes another's seats;
* within a level each principal is a **flow** with a queue of its own (per-flow queues rather
  than shuffle sharding: flows are few, and an exact queue per flow has no collisions);
* a request needs some seats (a get or a write 1, a watch 1 while it starts, a list one per 100
  objects it may return, at most :data:`MAX_SEATS`); it waits in its flow's queue until they
  are free. Queues are served max-min fair: the next request dispatched is the head of the
  queue whose flow holds the fewest seats, so a flow asking little is served before a flood;
  among flows holding as many, the one served least recently goes first (round robin), so a
  flood whose seats have all just been released does not go ahead of a quiet flow again;
* queues are bounded (``queue_length`` per flow, ``max_queued`` per level) and so is the wait
  (``wait_limit``): past either the request is rejected, which the API answers with 429;
* while another flow is active on the server (any level: its requests share the event loop and
  the database), a flow may also take no more seats per second than ``rate_per_seat`` times
  its level's seats on the server (a token bucket holding ``burst_s`` seconds' worth, at least
  the level's seats): its next request waits in its queue even with seats free, so a flood of
  short requests, which seats alone do not slow, leaves capacity idle for the others. Tied to
  the seats, the rate follows the level's share and is split among the servers with them. A
  flow alone on the server is not limited by rate: it may use all its level's seats. A request
  refused for a full queue while its flow is over its rate is marked ``paced``: the shell
  answers it only after the ``Retry-After`` it names, so a client that ignores it and sends
  again at once (a closed loop) cannot spin on refusals that cost the server CPU each.

The level's seat count is this server's part of the cluster's: see :func:`seat_limits`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_SEATS = 10  # the widest request, as Kubernetes' list estimate caps it
OBJECTS_PER_SEAT = 100

EXEMPT = "exempt"
SYSTEM = "system"
WORKLOAD_HIGH = "workload-high"
WORKLOAD_LOW = "workload-low"
GLOBAL_DEFAULT = "global-default"
CATCH_ALL = "catch-all"

# Shares as Kubernetes' defaults give them (leader election has no level: leases are written
# by components already in their own levels). Exempt has no limit.
SHARES: Mapping[str, int] = {
    SYSTEM: 30,
    WORKLOAD_HIGH: 40,
    WORKLOAD_LOW: 100,
    GLOBAL_DEFAULT: 20,
    CATCH_ALL: 5,
}
COMPONENTS = frozenset({"system:kube-scheduler", "system:kube-controller-manager"})

# Why a request was refused, as the metrics label it.
QUEUE_FULL = "queue-full"
TIME_OUT = "time-out"


def classify(name: str, groups: Iterable[str]) -> tuple[str, str]:
    """(priority level, flow) of a principal. The flow is the principal itself."""
    g = set(groups)
    if "system:masters" in g:
        level = EXEMPT  # the cluster's administrators can always reach it to repair it
    elif "system:nodes" in g or name.startswith("system:node:"):
        level = SYSTEM
    elif name in COMPONENTS:
        level = WORKLOAD_HIGH
    elif "system:serviceaccounts" in g or name.startswith("system:serviceaccount:"):
        level = WORKLOAD_LOW
    elif name and name != "system:anonymous":
        level = GLOBAL_DEFAULT
    else:
        level = CATCH_ALL
    return level, name


def list_seats(objects: int, limit: int | None) -> int:
    """Seats of a list that may return ``objects`` (fewer with a ``limit``)."""
    n = objects if limit is None or limit <= 0 else min(objects, limit)
    return max(1, min(MAX_SEATS, math.ceil(n / OBJECTS_PER_SEAT)))


def seat_limits(total: int, servers: int, shares: Mapping[str, int] = SHARES) -> dict[str, int]:
    """Each level's seats on one of ``servers`` API servers sharing ``total`` seats.

    Every server takes ``1/servers`` of each level (rounded down, at least one seat), so a
    principal spreading its requests over all servers holds at most what one server alone
    would give it, and one holding on to one server gets ``1/servers`` of it."""
    whole = sum(shares.values())
    n = max(1, servers)
    return {name: max(1, total * s // whole // n) for name, s in shares.items()}


@dataclass(eq=False)
class Request:
    """One request waiting for or holding seats. Identity matters: the shell keys on it."""

    level: str
    flow: str
    seats: int
    arrived: float
    seq: int
    state: str = "queued"  # queued, admitted, rejected, done
    reason: str = ""
    paced: bool = False  # refused while over its flow's rate: answer it no sooner than asked


@dataclass
class Flow:
    in_use: int = 0  # seats held
    queue: deque[Request] = field(default_factory=deque)
    dispatched: int = 0
    rejected: int = 0
    last_active: float = 0.0
    served: int = 0  # the level's dispatch count when this flow was last admitted
    tokens: float = -1.0  # seats it may take now under the rate limit (-1: a full bucket)
    refilled: float = 0.0  # when ``tokens`` was last brought up to date


@dataclass
class Level:
    name: str
    limit: int  # seats; 0 means no limit (exempt)
    in_use: int = 0
    queued: int = 0
    dispatched: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: {QUEUE_FULL: 0, TIME_OUT: 0})
    flows: dict[str, Flow] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    queue_length: int = 50  # requests one flow may have waiting in a level
    max_queued: int = 1000  # requests all flows of a level may have waiting
    wait_limit: float = 5.0  # seconds a request may wait before it is refused
    idle_flow_s: float = 600.0  # a flow's counters are forgotten this long after its last use
    rate_per_seat: float = 0.0  # a flow with company: seats per second per level seat (0: off)
    active_s: float = 1.0  # another flow used the server this recently: the rate limit applies
    burst_s: float = 2.0  # seconds of its rate a flow's bucket holds


class Dispatcher:
    """The levels of one API server and their queues."""

    def __init__(self, limits: Mapping[str, int], config: Config = Config()) -> None:
        self.config = config
        self.levels: dict[str, Level] = {EXEMPT: Level(EXEMPT, 0)}
        self.levels.update({n: Level(n, max(1, s)) for n, s in limits.items()})
        self._seq = 0
        # The two flows that used the server last and when, most recent first: whether a flow
        # has company is then one comparison, whatever the number of flows.
        self._recent: list[tuple[str, float]] = [("", -math.inf), ("", -math.inf)]
        self._now = 0.0
        self._in_passing: list[Request] = []

    def offer(self, level: str, flow: str, seats: int, now: float) -> Request:
        """A new request: admitted at once, queued, or rejected (``state`` says which)."""
        lv = self.levels.get(level) or self.levels[CATCH_ALL]
        self._seq += 1
        f = lv.flows.get(flow)
        if f is None:
            f = lv.flows[flow] = Flow()
        f.last_active = now
        self._active(flow, now)
        width = seats if lv.limit == 0 else max(1, min(seats, lv.limit))
        req = Request(lv.name, flow, width, now, self._seq)
        if lv.limit == 0 or (
            not lv.queued and lv.in_use + width <= lv.limit and self._within_rate(lv, f, req, now)
        ):
            self._admit(lv, f, req, now)  # nobody waits and it may run: no queue needed
            return req
        if len(f.queue) >= self.config.queue_length or lv.queued >= self.config.max_queued:
            self._reject(lv, f, req, QUEUE_FULL)
            req.paced = not self._within_rate(lv, f, req, now)
            return req
        f.queue.append(req)
        lv.queued += 1
        self._in_passing += [r for r in self._dispatch(lv, now) if r is not req]
        return req

    def admitted_in_passing(self) -> list[Request]:
        """Other flows' queued requests that an :meth:`offer` admitted (a head its flow's rate
        held back may run by the time another request arrives): the shell wakes them. Each
        is returned once."""
        out, self._in_passing = self._in_passing, []
        return out

    def release(self, req: Request, now: float) -> list[Request]:
        """``req`` finished: free its seats; returns the requests admitted in its place."""
        if req.state != "admitted":
            return []
        req.state = "done"
        lv = self.levels[req.level]
        lv.in_use -= req.seats
        f = lv.flows[req.flow]
        f.in_use -= req.seats
        f.last_active = now
        self._active(req.flow, now)
        return self._dispatch(lv, now)

    def expire(self, now: float) -> list[Request]:
        """Reject every queued request that has waited ``wait_limit`` or longer; returns them
        and the requests admitted in their place (a wide head gone, the next may fit)."""
        out: list[Request] = []
        deadline = now - self.config.wait_limit
        for lv in self.levels.values():
            expired = False
            for f in lv.flows.values():
                while f.queue and f.queue[0].arrived <= deadline:
                    req = f.queue.popleft()
                    lv.queued -= 1
                    self._reject(lv, f, req, TIME_OUT)
                    out.append(req)
                    expired = True
            if expired:
                out += self._dispatch(lv, now)
        return out

    def tick(self, now: float) -> list[Request]:
        """Admit what the rate limit held back and may now run (see :meth:`next_tick`)."""
        out: list[Request] = []
        for lv in self.levels.values():
            if lv.queued:
                out += self._dispatch(lv, now)
        return out

    def next_tick(self, now: float) -> float | None:
        """When a queue head held back by its flow's rate limit may run next (its bucket
        refilled or its flow left alone), if any: the shell calls :meth:`tick` then."""
        out: float | None = None
        for lv in self.levels.values():
            rate = self.rate(lv)
            if not lv.queued or not rate:
                continue
            for name, f in lv.flows.items():
                if not f.queue or self._within_rate(lv, f, f.queue[0], now):
                    continue
                need = min(f.queue[0].seats, self._burst(lv)) - f.tokens
                at = min(now + need / rate, self._company_until(name))
                out = at if out is None else min(out, at)
        return out

    def rate(self, lv: Level) -> float:
        """Seats per second a flow of ``lv`` may take on this server while others use it."""
        return lv.limit * self.config.rate_per_seat

    def cancel(self, req: Request, now: float) -> list[Request]:
        """The client went away: drop ``req`` from its queue, or release its seats."""
        if req.state == "admitted":
            return self.release(req, now)
        if req.state == "queued":
            lv = self.levels[req.level]
            lv.flows[req.flow].queue.remove(req)
            lv.queued -= 1
            req.state = "done"
            return self._dispatch(lv, now)
        return []

    def set_limits(self, limits: Mapping[str, int]) -> list[Request]:
        """New seat counts (the number of servers changed); returns requests now admitted.
        Seats already held above a lowered limit are kept until they are released."""
        out: list[Request] = []
        for name, seats in limits.items():
            lv = self.levels.get(name)
            if lv is None:
                self.levels[name] = Level(name, max(1, seats))
                continue
            lv.limit = max(1, seats)
            out += self._dispatch(lv, self._now)
        return out

    def prune(self, now: float) -> None:
        """Forget flows idle for ``idle_flow_s`` (their counters go with them)."""
        cutoff = now - self.config.idle_flow_s
        for lv in self.levels.values():
            idle = [k for k, f in lv.flows.items() if not f.in_use and not f.queue
                    and f.last_active < cutoff]  # fmt: skip
            for k in idle:
                del lv.flows[k]

    def _dispatch(self, lv: Level, now: float) -> list[Request]:
        """Admit queue heads while seats allow: the flow holding the fewest seats first, the
        one served least recently among equals; a flow over its rate waits aside. A head that
        does not fit waits (and so does everyone behind it) rather than being overtaken forever
        by narrower requests."""
        out: list[Request] = []
        while lv.queued:
            ready = [f for f in lv.flows.values()
                     if f.queue and self._within_rate(lv, f, f.queue[0], now)]  # fmt: skip
            if not ready:
                break
            f = min(ready, key=lambda f: (f.in_use, f.served, f.queue[0].seq))
            head = f.queue[0]
            if lv.in_use + head.seats > lv.limit:
                break
            f.queue.popleft()
            lv.queued -= 1
            self._admit(lv, f, head, now)
            out.append(head)
        return out

    def _active(self, flow: str, now: float) -> None:
        """``flow`` used the server at ``now``: keep the two most recent flows."""
        self._now = max(self._now, now)
        first = self._recent[0]
        if first[0] == flow:
            self._recent[0] = (flow, now)
        else:
            self._recent = [(flow, now), first]

    def _company_until(self, flow: str) -> float:
        """Until when ``flow`` counts as sharing the server with another flow."""
        first, second = self._recent
        other = second if first[0] == flow else first
        return other[1] + self.config.active_s

    def _burst(self, lv: Level) -> float:
        return max(float(lv.limit), self.rate(lv) * self.config.burst_s)  # at least the widest

    def _refill(self, lv: Level, f: Flow, now: float) -> None:
        if f.tokens < 0:
            f.tokens = self._burst(lv)
        elif now > f.refilled:
            f.tokens = min(self._burst(lv), f.tokens + (now - f.refilled) * self.rate(lv))
        f.refilled = max(f.refilled, now)

    def _within_rate(self, lv: Level, f: Flow, req: Request, now: float) -> bool:
        """Whether ``req`` may run now as far as its flow's rate goes: no limit, no company,
        or enough tokens (a request wider than the bucket needs it full)."""
        if not lv.limit or not self.config.rate_per_seat or self._company_until(req.flow) <= now:
            return True
        self._refill(lv, f, now)
        return f.tokens + 1e-6 >= min(req.seats, self._burst(lv))  # float error: no spin

    def _admit(self, lv: Level, f: Flow, req: Request, now: float) -> None:
        req.state = "admitted"
        lv.in_use += req.seats
        lv.dispatched += 1
        f.in_use += req.seats
        f.dispatched += 1
        f.served = lv.dispatched
        if lv.limit and self.config.rate_per_seat:  # alone or not, the bucket pays for it
            self._refill(lv, f, now)
            f.tokens = max(0.0, f.tokens - req.seats)

    @staticmethod
    def _reject(lv: Level, f: Flow, req: Request, reason: str) -> None:
        req.state = "rejected"
        req.reason = reason
        lv.rejected[reason] += 1
        f.rejected += 1
