"""What a discovery replica knows, and the steps it streams (ADR 0038).

The discovery service tails Services and EndpointSlices from the revision stream and keeps them
here as protocol resources (``app.core.traffic.protocol``). Each batch of changes becomes one
``Step``: the revision it brings the state to and the resource names it changed, with each
scope's delta encoded once for every subscriber that is at the previous step. A subscriber that
is behind, or that resumes from a version it sends, gets ``catch_up``: the current value of
every resource changed since its version, in one delta, or ``None`` when the history no longer
reaches back that far and only a snapshot will do.

It also answers the question the node agent asks before it sends SIGTERM to a terminating pod:
from which revision on do this replica's resources show the pod's endpoints terminating or gone
(``drained_at``). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.traffic import protocol
from app.core.traffic.protocol import ENDPOINT, Resources, Value

HISTORY_KEYS = 200_000  # resource names remembered across steps, for catch-ups without snapshots
Obj = dict[str, Any]


class Change(Protocol):
    """One change of a Service or EndpointSlice as the revision stream logs it (the shape of
    ``app.stream.informer.Change``)."""

    revision: int
    kind: str
    op: str  # "A", "M" or "D"
    uid: str
    namespace: str
    name: str
    obj: Obj


@dataclass
class Step:
    """The state moved from ``since`` to ``version`` by changing ``keys``; ``frames`` holds each
    scope's delta, encoded once."""

    version: int
    since: int
    keys: frozenset[str]
    frames: dict[str, bytes] = field(default_factory=dict)
    endpoint_changes: int = 0


@dataclass
class _PodMark:
    """A pod's endpoints (name -> whether it takes new connections) and the revision from
    which none of them does."""

    revision: int
    endpoints: dict[str, bool] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return any(self.endpoints.values())


class DiscoveryState:
    """The merged resources of every Service and EndpointSlice, at ``version``."""

    def __init__(self, history_keys: int = HISTORY_KEYS) -> None:
        self._max_history_keys = history_keys
        self._nonce = 0
        self._reset()

    def _reset(self) -> None:
        self.version = 0
        self.resources: Resources = {}
        self._slices: dict[str, Resources] = {}  # slice uid -> the endpoints it lists
        self._owners: dict[str, dict[str, Value]] = {}  # endpoint name -> slice uid -> value
        self._by_service: dict[str, set[str]] = {}  # service name -> its endpoint names
        self._pods: dict[tuple[str, str], _PodMark] = {}
        self._history: deque[Step] = deque()
        self._history_keys = 0
        self._catch_ups: dict[tuple[str, int], tuple[int, bytes]] = {}

    # -- loading --------------------------------------------------------------------------

    def load(self, version: int, changes: Iterable[Change]) -> None:
        """Start over from a list of every live object at ``version`` (history is dropped:
        subscribers behind it get a snapshot)."""
        self._reset()
        for ch in changes:
            self._apply(ch, version)
        self.version = version

    def apply(self, changes: Sequence[Change]) -> Step | None:
        """Apply a batch of changes in revision order; the step it makes, or None if it
        changed no resource (the version still moves)."""
        if not changes:
            return None
        version = max(self.version, changes[-1].revision)
        before = {k: self.resources.get(k) for k in self._touched(changes)}
        exposed_before = {k: self.in_scope("exposed", k) for k in before}
        for ch in changes:
            self._apply(ch, ch.revision)
        keys = {k for k, old in before.items() if self.resources.get(k) != old}
        for service in [k for k in before if k.startswith(protocol.SERVICE + "/")]:
            if exposed_before[service] != self.in_scope("exposed", service):
                members = self._by_service.get(service, set())
                keys |= {service} | members
                for k in members:
                    exposed_before.setdefault(k, exposed_before[service])
        since, self.version = self.version, version
        if not keys:
            return None
        step = Step(version, since, frozenset(keys))
        step.endpoint_changes = sum(1 for k in keys if k.startswith(ENDPOINT))
        step.frames["all"] = self._delta("all", keys, since, version)
        # An edge subscriber is told of removals only of what it could hold.
        relevant = {k for k in keys if exposed_before.get(k) or self.in_scope("exposed", k)}
        step.frames["exposed"] = self._delta("exposed", relevant, since, version)
        self._remember(step)
        return step

    def _touched(self, changes: Sequence[Change]) -> set[str]:
        keys: set[str] = set()
        for ch in changes:
            if ch.kind == "Service":
                keys.add(protocol.service_key(ch.namespace, ch.name))
            else:
                keys |= set(self._slices.get(ch.uid, {}))
                if ch.op != "D":
                    keys |= set(protocol.slice_resources(ch.obj))
        return keys

    def _apply(self, ch: Change, revision: int) -> None:
        if ch.kind == "Service":
            key = protocol.service_key(ch.namespace, ch.name)
            if ch.op == "D":
                self.resources.pop(key, None)
            else:
                self.resources[key] = protocol.service_resource(ch.obj)
            return
        old = self._slices.pop(ch.uid, {})
        new = protocol.slice_resources(ch.obj) if ch.op != "D" else {}
        if new:
            self._slices[ch.uid] = new
        for key in old.keys() - new.keys():
            owners = self._owners.get(key, {})
            owners.pop(ch.uid, None)
            self._settle(key, owners, revision)
        for key, value in new.items():
            owners = self._owners.setdefault(key, {})
            owners[ch.uid] = value
            self._settle(key, owners, revision)

    def _settle(self, key: str, owners: dict[str, Value], revision: int) -> None:
        """The endpoint's value from the slices that list it (any one, when it moves)."""
        service = protocol.service_of(key)
        old = self.resources.get(key)
        if owners:
            value = next(reversed(owners.values()))
            self.resources[key] = value
            self._by_service.setdefault(service, set()).add(key)
        else:
            value = None
            self._owners.pop(key, None)
            self.resources.pop(key, None)
            members = self._by_service.get(service)
            if members is not None:
                members.discard(key)
                if not members:
                    del self._by_service[service]
        self._mark_pod(key, old, value, revision)

    def _mark_pod(self, key: str, old: Value | None, new: Value | None, revision: int) -> None:
        _, namespace, _, pod = key.split("/", 3)
        mark = self._pods.setdefault((namespace, pod), _PodMark(revision))
        was_live = mark.live
        # A removed endpoint stays listed, not live, so the pod's services stay known.
        mark.endpoints[key] = new is not None and not new.get("t")
        if was_live and not mark.live:
            mark.revision = revision

    # -- what subscribers get -------------------------------------------------------------

    def in_scope(self, scope: str, key: str) -> bool:
        return scope == "all" or protocol.is_exposed(self.resources.get(protocol.service_of(key)))

    def view(self, scope: str) -> Resources:
        """Every resource a subscriber of ``scope`` holds."""
        if scope == "all":
            return self.resources
        return {k: v for k, v in self.resources.items() if self.in_scope(scope, k)}

    def snapshot(self, scope: str) -> bytes:
        return protocol.snapshot(self.version, self._next_nonce(), self.view(scope))

    def catch_up(self, scope: str, since: int) -> bytes | None:
        """One delta from ``since`` to now, or None if only a snapshot will do. Encoded once
        per scope and version held: a replica that many subscribers fail over to at once
        sends them all the same bytes."""
        cached = self._catch_ups.get((scope, since))
        if cached is not None and cached[0] == self.version:
            return cached[1]
        if since == self.version:
            frame = protocol.delta(self.version, since, self._next_nonce(), {}, [])
        elif since > self.version or not self._history or self._history[0].since > since:
            return None
        else:
            keys: set[str] = set()
            for step in reversed(self._history):
                if step.version <= since:
                    break
                keys |= step.keys
            frame = self._delta(scope, keys, since, self.version)
        if len(self._catch_ups) >= 64:
            self._catch_ups.clear()
        self._catch_ups[(scope, since)] = (self.version, frame)
        return frame

    def catch_up_services(
        self, scope: str, since: int, services: set[str], upto: int
    ) -> bytes | None:
        """One delta from ``since`` when the history does not reach back but the revision log
        says which ``services`` changed in (``since``, ``upto``]: each is reset and sent whole,
        with what the history adds after ``upto``. None if even that is not enough."""
        if since > self.version or upto > self.version:
            return None
        services = set(services)
        if upto < self.version:
            if not self._history or self._history[0].since > upto:
                return None
            for step in reversed(self._history):
                if step.version <= upto:
                    break
                services |= {protocol.service_of(k) for k in step.keys}
        changed: Resources = {}
        removed: list[str] = []
        for service in sorted(services):
            value = self.resources.get(service)
            if value is None or not self.in_scope(scope, service):
                removed.append(service)
                continue
            changed[service] = value
            for key in self._by_service.get(service, ()):
                changed[key] = self.resources[key]
        frame = protocol.delta(
            self.version, since, self._next_nonce(), changed, removed, sorted(services)
        )
        self._catch_ups[(scope, since)] = (self.version, frame)
        return frame

    def _delta(self, scope: str, keys: Iterable[str], since: int, version: int) -> bytes:
        changed: Resources = {}
        removed: list[str] = []
        for key in sorted(keys):
            value = self.resources.get(key)
            if value is not None and self.in_scope(scope, key):
                changed[key] = value
            else:
                removed.append(key)
        return protocol.delta(version, since, self._next_nonce(), changed, removed)

    def _remember(self, step: Step) -> None:
        self._history.append(step)
        self._history_keys += len(step.keys)
        while self._history_keys > self._max_history_keys and len(self._history) > 1:
            self._history_keys -= len(self._history.popleft().keys)

    def _next_nonce(self) -> int:
        self._nonce += 1
        return self._nonce

    # -- draining -------------------------------------------------------------------------

    def drained_at(self, namespace: str, pod: str) -> tuple[bool, int | None, set[str]]:
        """Whether no endpoint of the pod takes new connections here, the revision from which
        that holds (None: this replica never saw the pod as an endpoint), and the services it
        is an endpoint of."""
        mark = self._pods.get((namespace, pod))
        if mark is None:
            return True, None, set()
        services = {protocol.service_of(k) for k in mark.endpoints}
        return not mark.live, mark.revision, services

    def forget_pods(self, keep: int) -> None:
        """Drop the oldest marks of drained pods when there are more than ``keep`` (a pod
        deleted long ago needs no answer but "drained")."""
        if len(self._pods) <= keep:
            return
        gone = sorted((m.revision, p) for p, m in self._pods.items() if not m.live)
        for _, pod in gone[: len(self._pods) - keep]:
            del self._pods[pod]
