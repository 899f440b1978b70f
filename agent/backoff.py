"""The crash-loop restart backoff: how long a crashed container waits before its next start.

A container that keeps crashing is restarted after 10 s, then 20 s, 40 s ... never more than
5 minutes apart, so a crash loop costs the node little and still recovers by itself once the
cause goes away. A run that lasted 10 minutes without a crash resets the delay to 10 s, as
the kubelet does. Liveness-probe restarts go through the same backoff.

Pure state on an injected clock: every call takes `now` (monotonic seconds), nothing here
reads time or sleeps, so the loop asks `ready_at`/`can_restart` on each tick and tests step a
fake clock. One `CrashLoopBackoff` holds the entries of all containers of a node, keyed by
whatever the caller uses (pod uid and container name).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

INITIAL_SECONDS = 10.0
CAP_SECONDS = 300.0
RESET_AFTER_SECONDS = 600.0


@dataclass(frozen=True)
class Entry:
    delay: float  # the delay imposed by the latest crash
    ready_at: float  # monotonic time before which the container must not be restarted


class CrashLoopBackoff:
    def __init__(
        self,
        initial: float = INITIAL_SECONDS,
        cap: float = CAP_SECONDS,
        reset_after: float = RESET_AFTER_SECONDS,
    ) -> None:
        if not 0 < initial <= cap:
            raise ValueError("backoff needs 0 < initial <= cap")
        self.initial, self.cap, self.reset_after = initial, cap, reset_after
        self._entries: dict[Hashable, Entry] = {}

    def record_crash(self, key: Hashable, now: float, started_at: float | None = None) -> float:
        """Note that `key` exited at `now` (its run began at `started_at`); returns the delay
        before it may start again."""
        previous = self._entries.get(key)
        ran_long = started_at is not None and now - started_at >= self.reset_after
        if previous is None or ran_long or now - previous.ready_at >= self.reset_after:
            delay = self.initial
        else:
            delay = min(self.cap, previous.delay * 2)
        self._entries[key] = Entry(delay=delay, ready_at=now + delay)
        return delay

    def ready_at(self, key: Hashable) -> float | None:
        """When `key` may restart (None: no crash recorded, it may start at once)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.ready_at

    def can_restart(self, key: Hashable, now: float) -> bool:
        ready = self.ready_at(key)
        return ready is None or now >= ready

    def remaining(self, key: Hashable, now: float) -> float:
        """Seconds left to wait (0 when it may restart), for `CrashLoopBackOff` messages."""
        ready = self.ready_at(key)
        return 0.0 if ready is None else max(0.0, ready - now)

    def forget(self, key: Hashable) -> None:
        """Drop `key` (its pod is gone)."""
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
