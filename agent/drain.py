"""Termination waits for the proxies: before SIGTERM, until every node proxy stopped sending.

A pod being deleted is marked terminating in its EndpointSlices by the controller; the
discovery replicas stream that to every node proxy, which stops picking the endpoint for new
connections and acks the version. Only then is SIGTERM safe: a proxy that has not yet heard
would still send new connections to a process that is shutting down (Kubernetes' known race,
papered over there with a ``preStop`` sleep). So :meth:`agent.pods.PodWorker._terminate`, for
a deletion with a grace period, first asks every discovery replica concurrently
``GET <url>/v1/drained?namespace=NS&pod=NAME&timeout=S`` (a long poll that answers when every
live subscriber of that replica acked the version marking the pod terminating) and waits for
all of them, within a bound (ADR 0041).

The decisions are pure and here, on an injected clock: the bound (:func:`bound`, at most
``--drain-max`` and at most half the grace period, so the app keeps at least half of it after
SIGTERM), what an answer means (:func:`parse_answer`: an unreachable replica or an error
counts as drained, since its subscribers are disconnected and will resync by snapshot), and
when to ask again (:func:`next_ask`). :class:`Drainer` is the thin shell over httpx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)

REASK_GAP = 0.2  # a replica that answers "not drained" early is asked again after this
MIN_TIMEOUT = 0.05  # less time than this left: no new question
HTTP_SLACK = 1.0  # the HTTP timeout beyond the long poll's (the wait is cut at the bound anyway)


@dataclass(frozen=True)
class Answer:
    """What one replica said last. ``error``: it could not be asked or answered nonsense,
    which counts as drained; no ``error`` and not ``drained``: still waiting (or not asked)."""

    replica: str
    drained: bool = False
    version: int | None = None
    waiting: tuple[str, ...] = ()
    error: str = ""

    @property
    def counts_as_drained(self) -> bool:
        return self.drained or bool(self.error)


@dataclass(frozen=True)
class Ask:
    """Ask a replica again ``after`` seconds, with a long-poll ``timeout``."""

    after: float
    timeout: float


@dataclass(frozen=True)
class Outcome:
    """How a wait ended: how long it took, its bound, and each replica's last answer."""

    waited: float
    bound: float
    answers: tuple[Answer, ...] = ()

    @property
    def all_drained(self) -> bool:
        return all(a.counts_as_drained for a in self.answers)

    def summary(self) -> str:
        verdict = "all drained" if self.all_drained else "not all drained"
        parts = [f"waited {self.waited:.2f}s of at most {self.bound:.2f}s: {verdict}"]
        for a in self.answers:
            if a.error:
                parts.append(f"{a.replica} counted as drained ({a.error})")
            elif not a.drained:
                parts.append(f"{a.replica} still waiting on {len(a.waiting)} subscribers")
        return "; ".join(parts)


def bound(grace: float, drain_max: float) -> float:
    """The longest wait: ``drain_max``, and never more than half the grace period."""
    return max(0.0, min(drain_max, grace / 2.0))


def applies(*, deletion: bool, evicted: bool, grace: float, replicas: Sequence[str]) -> bool:
    """Whether a stop waits at all: only a deletion (not an eviction for node pressure, not a
    pod no longer assigned here, not the agent's own shutdown) with a grace period, and only
    when there are discovery replicas to ask."""
    return deletion and not evicted and grace > 0 and bool(replicas)


def parse_answer(replica: str, status: int, body: bytes) -> Answer:
    """A replica's HTTP answer as an :class:`Answer`; anything but a well-formed 200 is an
    error (counted as drained)."""
    if status != 200:
        return Answer(replica, error=f"HTTP {status}")
    try:
        doc: Any = json.loads(body)
    except ValueError:
        return Answer(replica, error="answer is not JSON")
    if not isinstance(doc, dict) or not isinstance(doc.get("drained"), bool):
        return Answer(replica, error="answer has no boolean 'drained'")
    version = doc.get("version")
    waiting = doc.get("waiting")
    return Answer(
        replica,
        drained=doc["drained"],
        version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        waiting=tuple(str(w) for w in waiting) if isinstance(waiting, list) else (),
    )


def next_ask(last: Answer, asked_at: float | None, now: float, deadline: float) -> Ask | None:
    """The next question to ``last``'s replica, or None: it counts as drained, or too little
    time is left. An early "not drained" is asked again after :data:`REASK_GAP`, not at once."""
    if last.counts_as_drained:
        return None
    after = 0.0 if asked_at is None else max(0.0, asked_at + REASK_GAP - now)
    timeout = deadline - now - after
    return Ask(after, timeout) if timeout >= MIN_TIMEOUT else None


AskFn = Callable[[str, str, str, float], Awaitable[Answer]]  # (replica, namespace, pod, timeout)


class Drainer:
    """Asks the discovery replicas at ``replicas`` (base URLs); one per agent, shared by its
    pod workers. ``ask`` and the clocks are injectable for tests."""

    def __init__(
        self,
        replicas: Sequence[str],
        drain_max: float,
        *,
        mono: Callable[[], float] = time.monotonic,
        pause: Callable[[float], Awaitable[None]] | None = None,
        ask: AskFn | None = None,
    ) -> None:
        self.replicas = tuple(r.rstrip("/") for r in replicas)
        self.drain_max, self.mono = drain_max, mono
        self.pause = pause if pause is not None else asyncio.sleep
        self.ask = ask if ask is not None else self.ask_http

    async def wait(self, namespace: str, pod: str, grace: float) -> Outcome:
        """Wait until every replica counts as drained or the bound passes; never raises."""
        limit = bound(grace, self.drain_max)
        start = self.mono()
        if not self.replicas or limit <= 0:
            return Outcome(0.0, limit)
        deadline = start + limit
        last = {r: Answer(r) for r in self.replicas}

        async def follow(replica: str) -> None:
            asked_at: float | None = None
            while (ask := next_ask(last[replica], asked_at, self.mono(), deadline)) is not None:
                if ask.after > 0:
                    await self.pause(ask.after)
                asked_at = self.mono()
                last[replica] = await self.ask(replica, namespace, pod, ask.timeout)

        tasks = [asyncio.ensure_future(follow(r)) for r in self.replicas]
        _, pending = await asyncio.wait(tasks, timeout=limit)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return Outcome(max(0.0, self.mono() - start), limit, tuple(last.values()))

    async def ask_http(self, replica: str, namespace: str, pod: str, timeout: float) -> Answer:
        """One long poll of one replica; a transport failure is an :class:`Answer` error."""
        params = {"namespace": namespace, "pod": pod, "timeout": f"{timeout:.3f}"}
        try:
            async with httpx.AsyncClient(timeout=timeout + HTTP_SLACK) as client:
                resp = await client.get(f"{replica}/v1/drained", params=params)
        except httpx.HTTPError as exc:
            answer = Answer(replica, error=f"unreachable: {exc.__class__.__name__}: {exc}")
        else:
            answer = parse_answer(replica, resp.status_code, resp.content)
        if answer.error:
            log.warning("discovery replica %s counted as drained: %s", replica, answer.error)
        return answer
