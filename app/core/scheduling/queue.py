"""The scheduling queue: priority first, then each team's fair share, then age.

* **active**: pods ready to be tried. The highest priority level always goes first, so a
  production pod created in the middle of a 100,000-task batch burst is next in line. Within a
  level, namespaces take turns by virtual time (each pod popped advances its namespace's
  clock), so one team's burst cannot starve another team at the same priority; within a
  namespace the oldest pod goes first.
* **backoff**: pods that failed recently wait ``initial * 2**(attempts-1)`` (capped) before
  they are tried again.
* **unschedulable**: pods that fit nowhere. They leave only when the cluster changes in a way
  that could help (a node added or changed, a pod gone or finished), through backoff, or after
  ``max_unschedulable`` seconds as a safety net — never in a hot loop.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field

from app.core.priority import band
from app.core.scheduling.podinfo import PodInfo


@dataclass
class _Level:
    by_ns: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)
    turns: list[tuple[float, int, str]] = field(default_factory=list)  # (vtime, seq, ns)
    vtime: dict[str, float] = field(default_factory=dict)
    clock: float = 0.0
    size: int = 0


class SchedulingQueue:
    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 60.0,
    ) -> None:
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._seq = itertools.count()
        self._levels: dict[int, _Level] = {}
        self._prios: list[int] = []  # heap of -priority
        self._active: dict[str, tuple[int, PodInfo]] = {}  # uid -> (seq, pod)
        self._backoff: list[tuple[float, int, str]] = []
        self._backing: dict[str, tuple[int, PodInfo, float]] = {}
        self.unschedulable: dict[str, tuple[PodInfo, float]] = {}  # uid -> (pod, since)
        self.attempts: Counter[str] = Counter()
        self.last_attempt: dict[str, float] = {}

    # -- membership ------------------------------------------------------------------------
    def __contains__(self, uid: str) -> bool:
        return uid in self._active or uid in self._backing or uid in self.unschedulable

    def __len__(self) -> int:
        return len(self._active) + len(self._backing) + len(self.unschedulable)

    @property
    def active_count(self) -> int:
        return len(self._active)

    def add(self, pod: PodInfo, now: float) -> None:
        """A new pending pod, or a new version of one."""
        if pod.uid in self._backing:
            seq, _old, ready = self._backing[pod.uid]
            self._backing[pod.uid] = (seq, pod, ready)
            return
        if pod.uid in self.unschedulable:
            old, since = self.unschedulable[pod.uid]
            if old.req == pod.req and old.nominated_node == pod.nominated_node:
                self.unschedulable[pod.uid] = (pod, since)
                return
            del self.unschedulable[pod.uid]  # its requirements changed: worth a new try
        self._push_active(pod)

    def remove(self, uid: str) -> None:
        self._active.pop(uid, None)  # lazily skipped in the heaps
        self._backing.pop(uid, None)
        self.unschedulable.pop(uid, None)
        self.attempts.pop(uid, None)
        self.last_attempt.pop(uid, None)

    def _push_active(self, pod: PodInfo) -> None:
        seq = next(self._seq)
        self._active[pod.uid] = (seq, pod)
        level = self._levels.get(pod.priority)
        if level is None:
            level = self._levels[pod.priority] = _Level()
            heapq.heappush(self._prios, -pod.priority)
        q = level.by_ns.get(pod.namespace)
        if q is None:
            q = level.by_ns[pod.namespace] = []
            vt = max(level.vtime.get(pod.namespace, 0.0), level.clock)
            level.vtime[pod.namespace] = vt
            heapq.heappush(level.turns, (vt, seq, pod.namespace))
        heapq.heappush(q, (pod.created, seq, pod.uid))
        level.size += 1

    # -- taking work -----------------------------------------------------------------------
    def pop(self, min_priority: int | None = None) -> PodInfo | None:
        """The next pod to try, or None when nothing is active (with ``min_priority``: when
        no active pod has at least that priority; the others stay queued)."""
        while self._prios:
            prio = -self._prios[0]
            if min_priority is not None and prio < min_priority:
                return None
            level = self._levels[prio]
            pod = self._pop_level(level)
            if pod is not None:
                return pod
            heapq.heappop(self._prios)
            del self._levels[prio]
        return None

    def _pop_level(self, level: _Level) -> PodInfo | None:
        while level.turns:
            vt, _seq, ns = level.turns[0]
            q = level.by_ns.get(ns)
            while q:
                _created, seq, uid = heapq.heappop(q)
                level.size -= 1
                entry = self._active.get(uid)
                if entry is None or entry[0] != seq:
                    continue  # removed or re-added since
                del self._active[uid]
                level.clock = vt
                nxt = vt + 1.0
                level.vtime[ns] = nxt
                if q:
                    heapq.heapreplace(level.turns, (nxt, next(self._seq), ns))
                else:
                    del level.by_ns[ns]
                    heapq.heappop(level.turns)
                return entry[1]
            # this namespace's queue is empty (all entries stale)
            level.by_ns.pop(ns, None)
            heapq.heappop(level.turns)
        return None

    # -- outcomes --------------------------------------------------------------------------
    def done(self, uid: str) -> None:
        """The pod was bound."""
        self.attempts.pop(uid, None)
        self.last_attempt.pop(uid, None)

    def backoff_for(self, uid: str) -> float:
        n = max(self.attempts[uid], 1)
        return float(min(self.initial_backoff * 2 ** (n - 1), self.max_backoff))

    def failed(self, pod: PodInfo, now: float) -> None:
        """No node fits: park the pod until the cluster changes."""
        self.attempts[pod.uid] += 1
        self.last_attempt[pod.uid] = now
        self.unschedulable[pod.uid] = (pod, now)

    def retry(self, pod: PodInfo, now: float) -> None:
        """A bind lost a race: try again after a backoff."""
        self.attempts[pod.uid] += 1
        self.last_attempt[pod.uid] = now
        self._to_backoff(pod, now + self.backoff_for(pod.uid) / 4)

    def _to_backoff(self, pod: PodInfo, ready: float) -> None:
        seq = next(self._seq)
        self._backing[pod.uid] = (seq, pod, ready)
        heapq.heappush(self._backoff, (ready, seq, pod.uid))

    def cluster_changed(self, now: float) -> int:
        """Something that could make room happened: unschedulable pods go through backoff."""
        moved = 0
        for uid, (pod, _since) in list(self.unschedulable.items()):
            del self.unschedulable[uid]
            ready = self.last_attempt.get(uid, now) + self.backoff_for(uid)
            self._to_backoff(pod, ready)
            moved += 1
        return moved

    def flush(self, now: float) -> int:
        """Move due backoff pods, and pods parked too long, to active."""
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            _ready, seq, uid = heapq.heappop(self._backoff)
            entry = self._backing.get(uid)
            if entry is None or entry[0] != seq:
                continue
            del self._backing[uid]
            self._push_active(entry[1])
            moved += 1
        if self.unschedulable:
            stale = [
                uid
                for uid, (_p, since) in self.unschedulable.items()
                if now - since >= self.max_unschedulable
            ]
            for uid in stale:
                pod, _since = self.unschedulable.pop(uid)
                self._push_active(pod)
                moved += 1
        return moved

    def next_ready(self) -> float | None:
        """When the earliest backoff pod becomes ready (None if there is none)."""
        while self._backoff:
            ready, seq, uid = self._backoff[0]
            entry = self._backing.get(uid)
            if entry is not None and entry[0] == seq:
                return ready
            heapq.heappop(self._backoff)
        return None

    def depth(self) -> dict[tuple[str, str], int]:
        """Pods waiting, by (priority band, state)."""
        out: Counter[tuple[str, str]] = Counter()
        for _seq, pod in self._active.values():
            out[(band(pod.priority), "active")] += 1
        for _seq, pod, _ready in self._backing.values():
            out[(band(pod.priority), "backoff")] += 1
        for pod, _since in self.unschedulable.values():
            out[(band(pod.priority), "unschedulable")] += 1
        return dict(out)
