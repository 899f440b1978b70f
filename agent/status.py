"""The pod status the agent reports, and whether it is worth a write.

The agent's runtime and probe loops keep a small :class:`PodView` per pod (each container
waiting, running or terminated, ready, started, restart count, last termination).
:func:`build_status` turns it into the Kubernetes-shaped ``status`` of the pod, starting from
the status the API holds so that fields others own (``DisruptionTarget`` from eviction,
``PodScheduled`` from the scheduler, ``nominatedNodeName``, ``qosClass`` ...) pass through
untouched. :func:`needs_write` compares only what the agent owns, and :class:`Coalescer`
holds back the short-lived "containers are being created" state, so a pod start costs two
writes (running, then ready), not one per probe or per step of the start.

Pure: time comes in as ``now`` (seconds since the epoch), and nothing here does I/O.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

AGENT_CONDITIONS = ("Initialized", "ContainersReady", "Ready")
OWNED_FIELDS = (
    "phase",
    "startTime",
    "hostIP",
    "podIP",
    "initContainerStatuses",
    "containerStatuses",
)
CREATING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


def format_time(seconds: float) -> str:
    """RFC 3339 in UTC with second precision, as the API prints timestamps."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Waiting:
    reason: str = "ContainerCreating"
    message: str = ""


@dataclass(frozen=True)
class Running:
    started_at: float


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str  # Completed, Error, OOMKilled, ...
    finished_at: float
    started_at: float | None = None
    signal: int | None = None
    message: str = ""


ContainerState = Waiting | Running | Terminated


@dataclass(frozen=True)
class ContainerView:
    """What the agent knows of one container right now."""

    name: str
    state: ContainerState
    ready: bool = False
    started: bool = False  # the startup probe passed (or there is none) and it is running
    restart_count: int = 0
    last_state: Terminated | None = None
    image: str = ""
    container_id: str = ""


@dataclass(frozen=True)
class PodView:
    containers: tuple[ContainerView, ...]
    start_time: float | None = None  # when the agent accepted the pod
    initialized: bool = True  # every init container has completed
    terminating: bool = False  # the agent is stopping the pod for good
    init_containers: tuple[ContainerView, ...] = ()
    host_ip: str = ""
    pod_ip: str = ""


# ---------------------------------------------------------------- phase


def _views(pod: Mapping[str, Any], view: PodView, key: str = "containers") -> list[ContainerView]:
    """One view per container in the spec, in spec order; unknown ones are being created
    (or, while init containers run, waiting for them)."""
    known = {c.name: c for c in (view.init_containers if key != "containers" else view.containers)}
    pending = Waiting() if view.initialized or key != "containers" else Waiting("PodInitializing")
    names = [str(c["name"]) for c in (pod.get("spec") or {}).get(key) or []]
    out = [known.get(name) or ContainerView(name, pending) for name in names]
    if not view.initialized and key == "containers":  # not started before the inits complete
        out = [c if c.state != Waiting() else dataclasses.replace(c, state=pending) for c in out]
    return out


def init_phase(restart_policy: str, inits: Iterable[ContainerView], terminating: bool) -> str:
    """The phase of a pod whose init containers have not all completed: ``Failed`` once one
    failed for good (``restartPolicy: Never``, or the pod is being stopped), else ``Pending``."""
    failed = any(isinstance(c.state, Terminated) and c.state.exit_code != 0 for c in inits)
    return "Failed" if failed and (restart_policy == "Never" or terminating) else "Pending"


def phase(restart_policy: str, containers: Iterable[ContainerView], terminating: bool) -> str:
    """The pod phase by Kubernetes' rules; a waiting container that ran before counts as
    stopped, since it is between restarts rather than not yet started."""
    running = waiting = stopped = succeeded = 0
    for c in containers:
        if isinstance(c.state, Running):
            running += 1
        elif isinstance(c.state, Terminated):
            stopped += 1
            succeeded += c.state.exit_code == 0
        elif c.last_state is not None:
            stopped += 1
        else:
            waiting += 1
    if terminating and running == 0:
        return "Succeeded" if stopped and stopped == succeeded and not waiting else "Failed"
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if not stopped:
        return "Pending"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if restart_policy == "Never" else "Running"


# ---------------------------------------------------------------- conditions


def _condition(kind: str, ok: bool, reason: str = "", message: str = "") -> Obj:
    cond: Obj = {"type": kind, "status": "True" if ok else "False"}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _gates(pod: Mapping[str, Any], by_type: Mapping[str, Obj]) -> str:
    """Why the pod's readiness gates hold it back ("" when they do not)."""
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        kind = gate.get("conditionType")
        if (by_type.get(kind) or {}).get("status") != "True":
            return f'corresponding condition of pod readiness gate "{kind}" is not True'
    return ""


def agent_conditions(
    pod: Mapping[str, Any], containers: list[ContainerView], pod_phase: str, initialized: bool
) -> list[Obj]:
    """``Initialized``, ``ContainersReady`` and ``Ready`` without transition times."""
    by_type = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    init = _condition("Initialized", initialized, "" if initialized else "ContainersNotInitialized")
    if pod_phase in ("Succeeded", "Failed"):
        done = [_condition(k, False, "PodCompleted") for k in ("ContainersReady", "Ready")]
        return [init, *done]
    unready = [c.name for c in containers if not c.ready]
    if unready:
        message = f"containers with unready status: [{' '.join(unready)}]"
        ready = _condition("ContainersReady", False, "ContainersNotReady", message)
        return [init, ready, _condition("Ready", False, "ContainersNotReady", message)]
    held = _gates(pod, by_type)
    gate = _condition("Ready", not held, "ReadinessGatesNotReady" if held else "", held)
    return [init, _condition("ContainersReady", True), gate]


def merge_conditions(old: list[Obj], mine: list[Obj], now: float) -> list[Obj]:
    """Replace the agent's conditions in ``old``, keep everyone else's, keep the order.

    A condition whose status did not change keeps its ``lastTransitionTime``; ``PodScheduled``
    is added (True) only if the scheduler's is missing."""
    fresh = {c["type"]: c for c in mine}
    stamp = format_time(now)

    def stamped(new: Obj, previous: Obj | None) -> Obj:
        same = previous is not None and previous.get("status") == new["status"]
        since = previous.get("lastTransitionTime") if same and previous else None
        return {**new, "lastTransitionTime": since or stamp}

    merged = [stamped(fresh.pop(c["type"]), c) if c.get("type") in fresh else c for c in old]
    if not any(c.get("type") == "PodScheduled" for c in old):
        merged.insert(0, stamped(_condition("PodScheduled", True), None))
    return merged + [stamped(c, None) for c in mine if c["type"] in fresh]


# ---------------------------------------------------------------- container statuses


def _terminated(t: Terminated, container_id: str) -> Obj:
    out: Obj = {
        "exitCode": t.exit_code,
        "reason": t.reason,
        "finishedAt": format_time(t.finished_at),
    }
    if t.started_at is not None:
        out["startedAt"] = format_time(t.started_at)
    if t.signal is not None:
        out["signal"] = t.signal
    if t.message:
        out["message"] = t.message
    if container_id:
        out["containerID"] = container_id
    return out


def _state(c: ContainerView) -> Obj:
    s = c.state
    if isinstance(s, Running):
        return {"running": {"startedAt": format_time(s.started_at)}}
    if isinstance(s, Terminated):
        return {"terminated": _terminated(s, c.container_id)}
    waiting: Obj = {"reason": s.reason}
    if s.message:
        waiting["message"] = s.message
    return {"waiting": waiting}


def container_status(c: ContainerView, spec: Mapping[str, Any]) -> Obj:
    running = isinstance(c.state, Running)
    out: Obj = {
        "name": c.name,
        "image": c.image or str(spec.get("image") or ""),
        "state": _state(c),
        "lastState": {"terminated": _terminated(c.last_state, "")} if c.last_state else {},
        "ready": c.ready and running,
        "restartCount": c.restart_count,
        "started": c.started and running,
    }
    if c.container_id:
        out["containerID"] = c.container_id
    return out


# ---------------------------------------------------------------- the whole status


def build_status(pod: Mapping[str, Any], view: PodView, now: float) -> Obj:
    """The pod's new ``status``: the API's current one with the agent's fields replaced."""
    old: Obj = copy.deepcopy(pod.get("status") or {})
    spec = pod.get("spec") or {}
    containers, inits = _views(pod, view), _views(pod, view, "initContainers")
    policy = str(spec.get("restartPolicy") or "Always")
    if view.initialized:
        pod_phase = phase(policy, containers, view.terminating)
    else:
        pod_phase = init_phase(policy, inits, view.terminating)
    specs = {
        str(c["name"]): c
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    }
    status = {**old, "phase": pod_phase}
    status["conditions"] = merge_conditions(
        list(old.get("conditions") or []),
        agent_conditions(pod, containers, pod_phase, view.initialized),
        now,
    )
    status["containerStatuses"] = [container_status(c, specs[c.name]) for c in containers]
    if inits:
        status["initContainerStatuses"] = [container_status(c, specs[c.name]) for c in inits]
    start = old.get("startTime") or (
        format_time(view.start_time) if view.start_time is not None else None
    )
    if start:
        status["startTime"] = start
    for key, ip in (("hostIP", view.host_ip), ("podIP", view.pod_ip)):
        if ip:
            status[key] = ip
            status[key + "s"] = [{"ip": ip}]
    return status


def evicted(status: Obj, message: str, now: float, by: str = "TerminationByAgent") -> Obj:
    """``status`` of a pod this agent evicted (node pressure): ``Failed``, reason ``Evicted``,
    and ``DisruptionTarget=True`` so a Job does not count it against its backoffLimit."""
    target = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": by,
        "message": message,
        "lastTransitionTime": format_time(now),
    }
    kept = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
    out = {**status, "phase": "Failed", "reason": "Evicted", "message": message}
    return {**out, "conditions": [*kept, target]}


def _owned(status: Mapping[str, Any]) -> tuple[Any, ...]:
    conditions = sorted(
        (
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or []
            if c.get("type") in (*AGENT_CONDITIONS, "PodScheduled")
        ),
        key=str,
    )
    return (*(status.get(k) or None for k in OWNED_FIELDS), conditions)


def needs_write(current: Mapping[str, Any], candidate: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` differs from the stored status in anything the agent owns."""
    return _owned(current) != _owned(candidate)


def _only_creating(candidate: Mapping[str, Any]) -> bool:
    """Nothing has run yet: every container is still being created for the first time."""
    statuses = [
        *(candidate.get("initContainerStatuses") or []),
        *(candidate.get("containerStatuses") or []),
    ]
    return candidate.get("phase") == "Pending" and all(
        (s.get("state") or {}).get("waiting", {}).get("reason") in CREATING_REASONS
        and not s.get("lastState")
        for s in statuses
    )


@dataclass
class Coalescer:
    """Decides when a pod's status is written; one per pod, driven by the agent's loop.

    Changes a client acts on (running, ready, restarts, exits) are written at once. The
    "being created" state is held back for ``settle`` seconds: a container that starts within
    that time costs one write (Running) instead of two."""

    settle: float = 1.0
    dirty_since: float | None = None

    def offer(self, current: Mapping[str, Any], candidate: Mapping[str, Any], now: float) -> bool:
        """``True`` if ``candidate`` should be written now (the caller then writes it)."""
        if not needs_write(current, candidate):
            self.dirty_since = None
            return False
        if self.dirty_since is None:
            self.dirty_since = now
        if _only_creating(candidate) and now < self.dirty_since + self.settle:
            return False
        self.dirty_since = None
        return True

    def wake_at(self) -> float | None:
        """When a held-back change falls due, if one is waiting."""
        return None if self.dirty_since is None else self.dirty_since + self.settle
