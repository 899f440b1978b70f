"""The node's heartbeat: the Lease ``quaymaster-node-lease/<node>``, renewed every 10 s.

The node lifecycle controller counts a renewal whenever the lease row changes and times it on
its own clock; when the node has been silent for 40 s it increments ``spec.epoch`` (fencing)
before declaring the node unreachable. So every renewal here is a conditional update on the
resourceVersion last read, that carries the epoch it read forward and never resets it: a
conflict means someone else (the controller) wrote, and the agent re-reads and renews on top
of that write. ``last_success`` (monotonic) tells the agent's loop how long it has gone without
a renewal: an at-most-one pod must be killed by its own agent after 30 s of that.

The object built for each renewal is a pure function (:func:`renewed`); :class:`LeaseKeeper`
is the shell that does the I/O and keeps the bookkeeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.api import LEASE, AgentApi, Unreachable
from app.core.errors import AlreadyExists, Conflict, NotFound, StatusError

log = logging.getLogger(__name__)
LEASE_NAMESPACE = "quaymaster-node-lease"
LEASE_SECONDS = 40
RENEW_EVERY = 10.0
SELF_KILL_AFTER = 30.0
Obj = dict[str, Any]


def format_micro(seconds: float) -> str:
    """RFC 3339 with microseconds: two renewals in one second still differ, so each one
    changes the row and is seen by the controller."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch_of(lease: Obj | None) -> int:
    epoch = ((lease or {}).get("spec") or {}).get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0


def renewed(current: Obj | None, node: str, now: float, duration: int = LEASE_SECONDS) -> Obj:
    """The lease to write: ``current`` (or a new one) held by ``node`` and renewed at ``now``
    (wall seconds). ``spec.epoch`` is carried over exactly as read; other fields are kept."""
    if current is None:
        return {
            "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": duration,
                "acquireTime": format_micro(now),
                "renewTime": format_micro(now),
                "epoch": 0,
            },
        }
    spec = dict(current.get("spec") or {})
    spec.update(
        holderIdentity=node,
        leaseDurationSeconds=duration,
        renewTime=format_micro(now),
        epoch=epoch_of(current),
    )
    spec.setdefault("acquireTime", format_micro(now))
    return {**current, "spec": spec}


@dataclass
class LeaseKeeper:
    """Renews one node's lease; ``renew()`` is one attempt, ``run()`` the 10 s loop."""

    api: AgentApi
    node: str
    duration: int = LEASE_SECONDS
    interval: float = RENEW_EVERY
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    last_success: float | None = None  # on ``monotonic``
    epoch: int = 0
    epoch_changes: int = 0  # how often the epoch read differed from the one before
    failures: int = 0  # consecutive
    on_recover: Callable[[], None] | None = None  # called when a renewal succeeds after failures
    _lease: Obj | None = field(default=None, repr=False)

    def since_success(self) -> float | None:
        """Seconds since the last successful renewal; ``None`` before the first."""
        return None if self.last_success is None else self.monotonic() - self.last_success

    def self_kill_due(self, limit: float = SELF_KILL_AFTER) -> bool:
        """Whether at-most-one pods must go: no successful renewal for ``limit`` seconds
        (counted from the keeper's creation if it never succeeded)."""
        since = self.since_success()
        return since is None or since >= limit

    def renew(self) -> bool:
        """One renewal; a lost race is re-read and retried once. False when the API could not
        be reached or refused: the caller retries on its next tick."""
        try:
            for attempt in range(2):
                try:
                    self._write()
                    break
                except Conflict:
                    self._lease = None  # someone else wrote: read theirs, keep their epoch
                    if attempt:
                        raise
        except (Unreachable, StatusError) as exc:
            self.failures += 1
            log.warning(
                "lease renewal of %s failed (%d in a row): %s", self.node, self.failures, exc
            )
            return False
        recovered, self.failures = self.failures > 0, 0
        self.last_success = self.monotonic()
        if recovered and self.on_recover is not None:
            self.on_recover()
        return True

    def _write(self) -> None:
        if self._lease is None:
            self._lease = self._read()
        if self._lease is None:
            self._lease = self._create()
            self._observe(self._lease)
            return
        self._observe(self._lease)
        body = renewed(self._lease, self.node, self.wall(), self.duration)
        self._lease = self.api.replace(LEASE, LEASE_NAMESPACE, body)

    def _read(self) -> Obj | None:
        try:
            return self.api.get(LEASE, LEASE_NAMESPACE, self.node)
        except NotFound:
            return None

    def _create(self) -> Obj:
        body = renewed(None, self.node, self.wall(), self.duration)
        try:
            return self.api.create(LEASE, LEASE_NAMESPACE, body)
        except NotFound:  # the namespace: the first agent of a cluster makes it
            self.api.ensure_namespace(LEASE_NAMESPACE)
            return self.api.create(LEASE, LEASE_NAMESPACE, body)
        except AlreadyExists as exc:
            raise Conflict(str(exc)) from exc

    def _observe(self, lease: Obj) -> None:
        epoch = epoch_of(lease)
        if epoch != self.epoch:
            if self.last_success is not None or self.epoch:
                self.epoch_changes += 1
                log.warning("lease of %s: epoch %d -> %d (fenced)", self.node, self.epoch, epoch)
            self.epoch = epoch

    def run(self, stop: threading.Event) -> None:
        """Renew every ``interval`` until ``stop``; after a failure retry sooner (1 s, 2 s, ...
        up to the interval) so a short outage costs less than a renewal period."""
        while not stop.is_set():
            ok = self.renew()
            wait = self.interval if ok else min(self.interval, 2.0 ** (self.failures - 1))
            stop.wait(wait)
