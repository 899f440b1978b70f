"""The pods bound to this node, as the control plane last said, and the fit check before start.

The agent's desired state is the set of pods whose ``spec.nodeName`` is this node. It is read
as Kubernetes informers read: list with ``fieldSelector=spec.nodeName=<node>`` across all
namespaces, then watch from the list's resourceVersion, folding ADDED/MODIFIED/DELETED events
into a map uid -> pod; bookmarks advance the version; ``410 Gone`` means the version fell out
of the server's history, so the map is rebuilt by a new list. When the API cannot be reached
the map is kept as it was (static stability: running pods keep running) and the source retries
with backoff, relisting once it is back, which is when pods reassigned meanwhile disappear.

:class:`AssignmentMap` and :func:`check_fit` are pure; :class:`AssignmentSource` is the shell.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.api import POD, AgentApi, Unreachable
from agent.machine import Resources
from app.core.errors import Gone, StatusError
from app.core.quantity import cpu_millis, to_bytes

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


def _uid(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


@dataclass
class AssignmentMap:
    """uid -> pod for one node, and the resourceVersion it reflects."""

    node: str
    pods: dict[str, Obj] = field(default_factory=dict)
    revision: str = ""

    def relist(self, items: Iterable[Obj], revision: str) -> None:
        self.pods = {_uid(p): p for p in items if _uid(p) and self._mine(p)}
        self.revision = revision

    def apply(self, event: Obj) -> bool:
        """Fold one watch event in; whether the set of pods or a pod changed."""
        obj = event.get("object") or {}
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if rv:
            self.revision = rv
        kind, uid = event.get("type"), _uid(obj)
        if kind == "BOOKMARK" or not uid:
            return False
        if kind == "DELETED" or not self._mine(obj):
            return self.pods.pop(uid, None) is not None
        if kind in ("ADDED", "MODIFIED"):
            self.pods[uid] = obj
            return True
        return False

    def _mine(self, pod: Obj) -> bool:
        return (pod.get("spec") or {}).get("nodeName") == self.node


def backoff(failures: int, base: float = 0.5, cap: float = 10.0) -> float:
    """Seconds to wait after ``failures`` consecutive failures: 0.5, 1, 2, ... up to 10.

    The cap matches the lease's renewal period: after an outage the relist that stops pods
    reassigned meanwhile comes at most one period after the API answers again, and sooner when
    the lease keeper gets through first and pokes the source (:meth:`AssignmentSource.poke`)."""
    return 0.0 if failures <= 0 else min(cap, base * 2.0 ** (failures - 1))


# -- fit check --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    uid: str
    namespace: str
    name: str
    reason: str  # OutOfcpu, OutOfmemory, OutOfpods: kubelet's reasons
    message: str


def pod_requests(pod: Obj) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the pod needs: the sum over its containers, or the
    largest init container's if that is more (init containers run one at a time, first)."""

    def amounts(c: Obj) -> tuple[int, int]:
        req = (c.get("resources") or {}).get("requests") or {}
        try:
            return cpu_millis(req.get("cpu", 0)), to_bytes(req.get("memory", 0))
        except (ValueError, TypeError):
            return 0, 0

    spec = pod.get("spec") or {}
    main = [amounts(c) for c in spec.get("containers") or [] if isinstance(c, dict)]
    init = [amounts(c) for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    cpu = max(sum(a[0] for a in main), max((a[0] for a in init), default=0))
    mem = max(sum(a[1] for a in main), max((a[1] for a in init), default=0))
    return cpu, mem


def _order(pod: Obj) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return (
        str(meta.get("creationTimestamp") or ""),
        str(meta.get("namespace")),
        str(meta.get("name")),
    )


def check_fit(
    pods: Iterable[Obj], allocatable: Resources, admitted: set[str]
) -> tuple[list[str], list[Refusal]]:
    """Which not-yet-admitted pods may start and which to refuse.

    Pods in ``admitted`` (already running or accepted) are charged first, whatever they ask;
    the others are considered oldest first, as kubelet does, each charged if it fits. Terminal
    pods hold nothing. The scheduler should never bind a pod that does not fit; this is the
    last line of defence against a stale scheduler or a hand-written ``nodeName``."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL and _uid(p)]
    cpu = mem = count = 0
    for p in live:
        if _uid(p) in admitted:
            c, m = pod_requests(p)
            cpu, mem, count = cpu + c, mem + m, count + 1
    accept: list[str] = []
    refuse: list[Refusal] = []
    for p in sorted((p for p in live if _uid(p) not in admitted), key=_order):
        if (p.get("metadata") or {}).get("deletionTimestamp"):
            continue  # never started here, and going: nothing to admit
        c, m = pod_requests(p)
        short = [
            ("cpu", c, cpu, allocatable.cpu_millis),
            ("memory", m, mem, allocatable.memory_bytes),
            ("pods", 1, count, allocatable.pods),
        ]
        over = next(((n, r, u, a) for n, r, u, a in short if u + r > a), None)
        if over is None:
            accept.append(_uid(p))
            cpu, mem, count = cpu + c, mem + m, count + 1
            continue
        n, r, u, a = over
        meta = p.get("metadata") or {}
        refuse.append(
            Refusal(
                _uid(p),
                str(meta.get("namespace") or ""),
                str(meta.get("name") or ""),
                f"OutOf{n}",
                f"Pod was rejected: Node didn't have enough resource: {n}, requested: {r}, "
                f"used: {u}, capacity: {a}",
            )
        )
    return accept, refuse


def refusal_status(refusal: Refusal) -> Obj:
    """The pod status that reports a refusal (the loop writes it)."""
    return {"phase": "Failed", "reason": refusal.reason, "message": refusal.message}


# -- the shell --------------------------------------------------------------------------------


@dataclass
class AssignmentSource:
    """Keeps an :class:`AssignmentMap` current from the API; ``run()`` in a thread of its own
    (it holds its own client, since a watch stream occupies it), ``snapshot()`` from the loop."""

    api: AgentApi
    node: str
    watch_timeout: int = 60
    monotonic: Callable[[], float] = time.monotonic
    map: AssignmentMap = field(init=False)
    listed: bool = False  # a list has succeeded at least once: the set means something
    needs_list: bool = True
    failures: int = 0
    last_sync: float | None = None  # monotonic time of the last list or event
    changed: threading.Event = field(default_factory=threading.Event)
    jitter: Callable[[], float] = lambda: random.uniform(0.8, 1.2)
    # Waits out a backoff: returns when the event (a poke) is set or the seconds have passed.
    wait: Callable[[threading.Event, float], object] = threading.Event.wait
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _poked: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.map = AssignmentMap(self.node)

    @property
    def selector(self) -> str:
        return f"spec.nodeName={self.node}"

    def snapshot(self) -> dict[str, Obj]:
        """The desired pods, uid -> pod; the last known set while the API is away."""
        with self._lock:
            return dict(self.map.pods)

    def step(self, stop: threading.Event | None = None) -> float:
        """One list, or one watch session; the seconds to wait before the next step."""
        try:
            if self.needs_list:
                self._list()
            else:
                self._watch(stop)
        except Gone:
            log.info("assignments of %s: watch version too old; relisting", self.node)
            self.needs_list = True
            return 0.0
        except (Unreachable, StatusError) as exc:
            self.failures += 1
            self.needs_list = True  # on return, a full list drops pods reassigned meanwhile
            delay = (
                backoff(self.failures) * self.jitter()
            )  # agents back after one outage spread out
            log.warning("assignments of %s: %s; retrying in %.1f s", self.node, exc, delay)
            return delay
        self.failures = 0
        return 0.0

    def _list(self) -> None:
        items, revision = self.api.list_items(POD, None, field_selector=self.selector)
        with self._lock:
            self.map.relist(items, revision)
        self.listed, self.needs_list = True, False
        self.last_sync = self.monotonic()
        self.changed.set()

    def _watch(self, stop: threading.Event | None) -> None:
        events = self.api.watch(
            POD,
            None,
            self.map.revision,
            field_selector=self.selector,
            timeout_seconds=self.watch_timeout,
        )
        with contextlib.closing(events):  # leaving early closes the stream at once
            for event in events:
                with self._lock:
                    moved = self.map.apply(event)
                self.last_sync = self.monotonic()
                if moved:
                    self.changed.set()
                if stop is not None and stop.is_set():
                    return

    def poke(self) -> None:
        """Cut a backoff wait short: the API answered someone else (the lease keeper), or the
        agent is stopping."""
        self._poked.set()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            delay = self.step(stop)
            if delay and not stop.is_set():
                self.wait(self._poked, delay)
            self._poked.clear()
