"""Node memory pressure: when this machine runs short of memory, evict pods before the kernel's
OOM killer picks a victim at random, and tell the scheduler to place nothing more here.

The agent's loop calls :meth:`agent.pressure_monitor.PressureMonitor.tick` (the shell) every
tick; every ``interval`` seconds it reads the signal ``memory.available`` (``/proc/meminfo``'s
``MemAvailable`` on a real machine, or the node's allocatable memory minus what the agent's
pods use, for a machine shared with other work and for tests), compares it with the hard
threshold (``--eviction-hard memory.available<100Mi``) and, while it is met, evicts **one**
pod and waits for the next reading, as the kubelet does. The victim is ranked the kubelet's
way (:func:`rank`): pods using more memory than they request first, then lowest priority,
then (this project's tie-break) BestEffort before Burstable, then the largest use above the
request. Once met, the threshold stays met until ``minimum reclaim`` more than the threshold
is free again.

The node reports ``MemoryPressure`` (True ``AgentHasInsufficientMemory`` / False
``AgentHasSufficientMemory``) and carries the ``node.quaymaster.io/memory-pressure:NoSchedule``
taint while the threshold was met within the last ``transition period`` (30 s), so neither
flaps around the threshold.
An evicted pod is stopped with no grace period (a hard threshold cannot wait), reported
``Failed``/``Evicted`` with ``DisruptionTarget=True`` by its worker, and an ``Evicted``
Warning Event is recorded; its controller replaces it elsewhere.

Everything here is pure and takes time as an input: the QoS class, the settings' parsers, the
ranking, the decision on a fake clock, the condition, the taint and the messages.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.assignments import pod_requests
from agent.lease import format_micro
from agent.status import format_time
from app.core.quantity import cpu_millis, to_bytes

Obj = dict[str, Any]
QoS = Literal["Guaranteed", "Burstable", "BestEffort"]

CONDITION = "MemoryPressure"
UNDER_REASON = "AgentHasInsufficientMemory"
OK_REASON = "AgentHasSufficientMemory"
TAINT_KEY = "node.quaymaster.io/memory-pressure"
EVICTED_REASON = "Evicted"
SIGNAL = "memory.available"
SOURCES = ("meminfo", "pods")
# The kubelet never evicts system-critical pods (system-cluster-critical and above).
CRITICAL_PRIORITY = 2_000_000_000
_QOS_RANK = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}


# -- QoS class ---------------------------------------------------------------------------------


def _amounts(c: Obj, part: str) -> dict[str, int]:
    raw = (c.get("resources") or {}).get(part) or {}
    return {
        k: to_bytes(raw[k]) if k == "memory" else cpu_millis(raw[k])
        for k in raw
        if k in ("cpu", "memory")
    }


def qos_class(pod: Obj) -> QoS:
    """Kubernetes' QoS class from the spec: BestEffort when no container (init containers
    included) sets a CPU or memory request or limit; Guaranteed when every container limits
    both and requests (where given) equal the limits; Burstable otherwise."""
    spec = pod.get("spec") or {}
    containers = [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
        if isinstance(c, dict)
    ]
    guaranteed, anything = True, False
    for c in containers:
        requests, limits = _amounts(c, "requests"), _amounts(c, "limits")
        anything = anything or bool(requests) or bool(limits)
        if set(limits) != {"cpu", "memory"} or any(requests[k] != limits[k] for k in requests):
            guaranteed = False
    if not anything:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# -- settings ----------------------------------------------------------------------------------

_THRESHOLD = re.compile(r"^\s*([a-z.]+)\s*<\s*(\S+)\s*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Threshold:
    """``memory.available<500Mi`` (an amount) or ``memory.available<10%`` (of capacity)."""

    amount: int | None = 100 * 2**20
    percent: float | None = None

    def bytes_of(self, capacity: int) -> int:
        if self.percent is not None:
            return int(capacity * self.percent / 100)
        return self.amount or 0


def parse_threshold(text: str) -> Threshold:
    """The kubelet's ``--eviction-hard`` syntax for the one signal the agent has; ValueError
    with the reason otherwise."""
    m = _THRESHOLD.match(text)
    if not m:
        raise ValueError(f"{text!r} is not <signal><<quantity>, e.g. memory.available<500Mi")
    name, value = m.groups()
    if name != SIGNAL:
        raise ValueError(f"signal {name!r} is not supported (only {SIGNAL})")
    if value.endswith("%"):
        try:
            percent = float(value[:-1])
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage") from None
        if not 0 < percent < 100:
            raise ValueError(f"{value!r} must be between 0% and 100%")
        return Threshold(amount=None, percent=percent)
    try:
        amount = to_bytes(value)
    except (ValueError, TypeError):
        raise ValueError(f"{value!r} is not a quantity such as 500Mi") from None
    if amount <= 0:
        raise ValueError(f"{value!r} must be more than zero")
    return Threshold(amount=amount)


def parse_seconds(text: str) -> float:
    """``30``, ``30s``, ``1m30s``, ``500ms`` as seconds; ValueError if not a duration."""
    text = text.strip()
    try:
        return _non_negative(float(text), text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 30s or 1m30s")
    return _non_negative(sum(float(n) * _UNIT[u] for n, u in parts), text)


def _non_negative(value: float, text: str) -> float:
    if value < 0:
        raise ValueError(f"{text!r} cannot be negative")
    return value


@dataclass(frozen=True)
class EvictionConfig:
    threshold: Threshold = field(default_factory=Threshold)
    min_reclaim: int = 0
    transition_period: float = 30.0
    interval: float = 5.0
    source: str = "meminfo"


def eviction_config(
    hard: str, min_reclaim: str, transition: str, interval: str, source: str
) -> EvictionConfig:
    """The settings from their flag texts; ValueError naming the bad one."""
    if source not in SOURCES:
        raise ValueError(f"pressure source {source!r} is not one of {', '.join(SOURCES)}")
    try:
        reclaim = to_bytes(min_reclaim)
    except (ValueError, TypeError):
        raise ValueError(f"minimum reclaim {min_reclaim!r} is not a quantity") from None
    if reclaim < 0:
        raise ValueError(f"minimum reclaim {min_reclaim!r} cannot be negative")
    every = parse_seconds(interval)
    if every <= 0:
        raise ValueError(f"pressure interval {interval!r} must be more than zero")
    return EvictionConfig(parse_threshold(hard), reclaim, parse_seconds(transition), every, source)


# -- ranking and deciding ----------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A pod that may be evicted, with what the decision needs to know of it."""

    uid: str
    namespace: str
    name: str
    qos: QoS
    priority: int
    request: int  # memory bytes requested
    usage: int  # working set bytes now

    @property
    def exceeds(self) -> bool:
        return self.usage > self.request


def candidate(pod: Obj, usage: int) -> Candidate:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    priority = spec.get("priority")
    return Candidate(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        qos=qos_class(pod),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        request=pod_requests(pod)[1],
        usage=usage,
    )


def rank(pods: Iterable[Candidate]) -> list[Candidate]:
    """Eviction order: usage above requests first, lower priority first, BestEffort before
    Burstable before Guaranteed, larger use above the request first; critical pods never."""
    return sorted(
        (p for p in pods if p.priority < CRITICAL_PRIORITY),
        key=lambda p: (not p.exceeds, p.priority, _QOS_RANK[p.qos], -(p.usage - p.request), p.uid),
    )


@dataclass(frozen=True)
class PressureState:
    met_at: float | None = None  # monotonic time the threshold was last seen met
    reclaiming: bool = False  # met at the last reading: the minimum reclaim applies


@dataclass(frozen=True)
class Verdict:
    met: bool  # the threshold is met now: evict
    under_pressure: bool  # what the node condition and taint say
    available: int
    threshold: int
    victim: Candidate | None = None


def decide(
    state: PressureState,
    cfg: EvictionConfig,
    available: int,
    capacity: int,
    pods: Iterable[Candidate],
    now: float,
    evicting: bool = False,
) -> tuple[PressureState, Verdict]:
    """One reading: whether the threshold is met, whether the node is under pressure, and
    the single pod to evict (none while an earlier eviction is still going)."""
    threshold = cfg.threshold.bytes_of(capacity)
    met = available < threshold + (cfg.min_reclaim if state.reclaiming else 0)
    met_at = now if met else state.met_at
    under = met or (met_at is not None and now - met_at < cfg.transition_period)
    ranked = rank(pods) if met and not evicting else []
    victim = ranked[0] if ranked else None
    return PressureState(met_at, met), Verdict(met, under, available, threshold, victim)


# -- what the node shows -----------------------------------------------------------------------


def pressure_condition(previous: Obj | None, under: bool, now: float) -> Obj:
    """The ``MemoryPressure`` node condition; the transition time moves only with the status."""
    stamp = format_micro(now)
    value = "True" if under else "False"
    same = previous is not None and previous.get("status") == value
    since = previous.get("lastTransitionTime") if same and previous else None
    return {
        "type": CONDITION,
        "status": value,
        "reason": UNDER_REASON if under else OK_REASON,
        "message": "the node has insufficient memory available"
        if under
        else "the node has sufficient memory available",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": since or stamp,
    }


def with_condition(conditions: list[Obj], under: bool, now: float) -> list[Obj] | None:
    """``conditions`` with ``MemoryPressure`` set; None if it already says so."""
    previous = next((c for c in conditions if c.get("type") == CONDITION), None)
    wanted = pressure_condition(previous, under, now)
    if previous is not None and previous.get("status") == wanted["status"]:
        return None
    return [*(c for c in conditions if c.get("type") != CONDITION), wanted]


def with_taint(taints: list[Obj], present: bool, stamp: str) -> list[Obj] | None:
    """``taints`` with the memory-pressure taint added or removed; None if nothing changes."""
    has = any(t.get("key") == TAINT_KEY for t in taints)
    if has == present:
        return None
    if present:
        return [*taints, {"key": TAINT_KEY, "effect": "NoSchedule", "timeAdded": stamp}]
    return [t for t in taints if t.get("key") != TAINT_KEY]


def _human(amount: int | None) -> str:
    return f"{(amount or 0) // 1024}Ki"


def eviction_message(verdict: Verdict, containers: Iterable[tuple[str, int, int]]) -> str:
    """The kubelet's wording; ``containers`` are (name, usage, request) of the victim's."""
    text = (
        "The node was low on resource: memory. Threshold quantity: "
        f"{_human(verdict.threshold)}, available: {_human(max(0, verdict.available))}. "
    )
    for name, usage, request in containers:
        if usage > request:
            text += (
                f"Container {name} was using {_human(usage)}, request is {_human(request)}, "
                "has larger consumption of memory. "
            )
    return text.strip()


def event_body(pod: Obj, message: str, node: str, now: float) -> Obj:
    meta = pod.get("metadata") or {}
    stamp = format_time(now)
    return {
        "metadata": {"name": f"{meta.get('name')}.{secrets.token_hex(5)}"},
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "quaymaster.io/v1",
            "name": str(meta.get("name") or ""),
            "namespace": str(meta.get("namespace") or ""),
            "uid": str(meta.get("uid") or ""),
        },
        "reason": EVICTED_REASON,
        "message": message,
        "type": "Warning",
        "count": 1,
        "source": {"component": "quaymaster-agent", "host": node},
        "reportingComponent": "quaymaster-agent",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
    }


def container_request(c: Obj) -> int:
    """The memory one container requests, in bytes (0 when unset)."""
    return _amounts(c, "requests").get("memory", 0)
