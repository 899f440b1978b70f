"""Container probes as pure values: what to probe, when, and what a result means.

The agent's pod loop owns one :class:`ContainerProbes` per running container. It asks which
probes are due (:func:`due`), launches them with :func:`launch` (which hands back a ticket and
advances the schedule), runs them through :mod:`agent.probe_exec`, and feeds each outcome back
through :func:`observe`, which returns the new state and the verdicts to act on: ``Ready(bool)``
(only flips the container's readiness) and ``Restart(reason)`` (kill and restart in place).

Nothing here reads a clock or does I/O, so thresholds, delays and startup gating are tested
on plain numbers. Semantics follow Kubernetes: a startup probe gates the other two until it
succeeds; readiness starts as not ready, liveness as healthy; a timeout counts as a failure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

ProbeKind = Literal["startup", "readiness", "liveness"]
KINDS: tuple[ProbeKind, ...] = ("startup", "readiness", "liveness")
FIELDS: dict[ProbeKind, str] = {
    "startup": "startupProbe",
    "readiness": "readinessProbe",
    "liveness": "livenessProbe",
}
LIVENESS_FAILED = "LivenessProbeFailed"
STARTUP_FAILED = "StartupProbeFailed"


class ProbeSpecError(ValueError):
    """A probe the agent cannot run (admission should have refused it)."""


@dataclass(frozen=True)
class ExecAction:
    command: tuple[str, ...]


@dataclass(frozen=True)
class HttpGetAction:
    port: int
    path: str = "/"
    host: str | None = None  # None: the pod's address, chosen by the runtime
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TcpAction:
    port: int
    host: str | None = None


Action = ExecAction | HttpGetAction | TcpAction


@dataclass(frozen=True)
class ProbeSpec:
    kind: ProbeKind
    action: Action
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


class Outcome(Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class ProbeResult:
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True)
class Ready:
    """The container's readiness flipped to ``ready``."""

    ready: bool


@dataclass(frozen=True)
class Restart:
    """Kill the container and restart it in place (subject to the restart backoff)."""

    reason: str
    message: str = ""


Verdict = Ready | Restart


# ---------------------------------------------------------------- parsing the pod spec


def _port(raw: Any, named: Mapping[str, int]) -> int:
    if isinstance(raw, bool):
        raise ProbeSpecError(f"port {raw!r} is not a port")
    if isinstance(raw, int):
        port = raw
    elif isinstance(raw, str) and raw.isdigit():
        port = int(raw)
    elif isinstance(raw, str) and raw in named:
        port = named[raw]
    else:
        raise ProbeSpecError(f"port {raw!r} is neither a number nor a named container port")
    if not 1 <= port <= 65535:
        raise ProbeSpecError(f"port {port} is out of range")
    return port


def _action(raw: Mapping[str, Any], named: Mapping[str, int]) -> Action:
    if "exec" in raw:
        command = (raw["exec"] or {}).get("command") or []
        if not command:
            raise ProbeSpecError("exec probe without a command")
        return ExecAction(tuple(str(part) for part in command))
    if "httpGet" in raw:
        body = raw["httpGet"] or {}
        path = str(body.get("path") or "/")
        headers = tuple(
            (str(h["name"]), str(h.get("value", ""))) for h in body.get("httpHeaders") or []
        )
        return HttpGetAction(
            port=_port(body.get("port"), named),
            path=path if path.startswith("/") else "/" + path,
            host=body.get("host") or None,
            scheme=str(body.get("scheme") or "HTTP").upper(),
            headers=headers,
        )
    if "tcpSocket" in raw:
        body = raw["tcpSocket"] or {}
        return TcpAction(port=_port(body.get("port"), named), host=body.get("host") or None)
    raise ProbeSpecError(f"no supported handler among {sorted(raw)} (exec, httpGet, tcpSocket)")


def _number(raw: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProbeSpecError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_probe(kind: ProbeKind, raw: Mapping[str, Any], named: Mapping[str, int]) -> ProbeSpec:
    """One probe from its Kubernetes form; ``named`` maps container port names to numbers."""
    success = _number(raw, "successThreshold", 1, 1)
    if kind != "readiness" and success != 1:
        raise ProbeSpecError(f"successThreshold must be 1 for a {kind} probe")
    return ProbeSpec(
        kind=kind,
        action=_action(raw, named),
        initial_delay=_number(raw, "initialDelaySeconds", 0, 0),
        period=_number(raw, "periodSeconds", 10, 1),
        timeout=_number(raw, "timeoutSeconds", 1, 1),
        success_threshold=success,
        failure_threshold=_number(raw, "failureThreshold", 3, 1),
    )


def parse_container(container: Mapping[str, Any]) -> dict[ProbeKind, ProbeSpec]:
    """The probes a container declares, keyed by kind (absent kinds are left out)."""
    named = {
        str(p["name"]): int(p["containerPort"])
        for p in container.get("ports") or []
        if p.get("name") and p.get("containerPort")
    }
    return {
        kind: parse_probe(kind, container[field], named)
        for kind, field in FIELDS.items()
        if container.get(field)
    }


# ---------------------------------------------------------------- one probe's state


@dataclass(frozen=True)
class ProbeState:
    spec: ProbeSpec
    next_due: float
    healthy: bool  # the probe's current verdict
    successes: int = 0  # consecutive
    failures: int = 0  # consecutive
    seq: int = 0  # launches so far; a result must carry the latest
    in_flight: bool = False


def _next_tick(due: float, period: float, now: float) -> float:
    """The first tick of the schedule ``due + k * period`` strictly after ``now``.

    Late launches skip missed ticks instead of bunching, and keep the original phase."""
    if now < due:
        return due + period
    return due + (math.floor((now - due) / period) + 1) * period


def _record(state: ProbeState, result: ProbeResult) -> ProbeState:
    if result.outcome is Outcome.SUCCESS:
        successes, failures = state.successes + 1, 0
    else:
        successes, failures = 0, state.failures + 1
    healthy = state.healthy
    if successes >= state.spec.success_threshold:
        healthy = True
    if failures >= state.spec.failure_threshold:
        healthy = False
    return dataclasses.replace(
        state, successes=successes, failures=failures, healthy=healthy, in_flight=False
    )


# ---------------------------------------------------------------- a container's probes


@dataclass(frozen=True)
class Ticket:
    """Names one launched probe, so a result from an earlier launch or incarnation is ignored."""

    kind: ProbeKind
    started_at: float
    seq: int


@dataclass(frozen=True)
class ContainerProbes:
    """The probes of one container incarnation (a restart starts a fresh one)."""

    started_at: float
    probes: Mapping[ProbeKind, ProbeState]
    started: bool  # the startup probe succeeded, or there is none
    ready: bool
    restarting: bool = False  # a Restart was issued; nothing more is probed


def start(specs: Mapping[ProbeKind, ProbeSpec], started_at: float) -> ContainerProbes:
    """Probe state for a container that started running at ``started_at``.

    Each probe is first due ``initialDelaySeconds`` after the start. A container without a
    startup probe counts as started at once, and without a readiness probe as ready once
    started."""
    probes = {
        kind: ProbeState(spec, started_at + spec.initial_delay, healthy=kind == "liveness")
        for kind, spec in specs.items()
    }
    started = "startup" not in probes
    return ContainerProbes(
        started_at, probes, started=started, ready=started and "readiness" not in probes
    )


def _gated(cp: ContainerProbes, kind: ProbeKind) -> bool:
    return kind != "startup" and not cp.started


def due(cp: ContainerProbes, now: float) -> list[ProbeKind]:
    """The probes to launch now, startup first."""
    if cp.restarting:
        return []
    return [
        kind
        for kind in KINDS
        if (s := cp.probes.get(kind)) is not None
        and not s.in_flight
        and not _gated(cp, kind)
        and s.next_due <= now
        and not (kind == "startup" and cp.started)
    ]


def next_wakeup(cp: ContainerProbes) -> float | None:
    """When the earliest probe not yet launched falls due; ``None`` if none ever will."""
    if cp.restarting:
        return None
    times = [
        s.next_due
        for kind, s in cp.probes.items()
        if not s.in_flight and not _gated(cp, kind) and not (kind == "startup" and cp.started)
    ]
    return min(times, default=None)


def launch(cp: ContainerProbes, kind: ProbeKind, now: float) -> tuple[ContainerProbes, Ticket]:
    """Mark ``kind`` as running and move its schedule to the next period."""
    s = cp.probes[kind]
    launched = dataclasses.replace(
        s, in_flight=True, seq=s.seq + 1, next_due=_next_tick(s.next_due, s.spec.period, now)
    )
    probes = {**cp.probes, kind: launched}
    return dataclasses.replace(cp, probes=probes), Ticket(kind, cp.started_at, launched.seq)


def _with(cp: ContainerProbes, state: ProbeState) -> ContainerProbes:
    return dataclasses.replace(cp, probes={**cp.probes, state.spec.kind: state})


def _on_startup(cp: ContainerProbes, s: ProbeState, now: float) -> ContainerProbes:
    """The startup probe passed: readiness and liveness start, no earlier than their delay."""
    probes = dict(cp.probes)
    for kind in ("readiness", "liveness"):
        if (other := probes.get(kind)) is not None:
            probes[kind] = dataclasses.replace(other, next_due=max(other.next_due, now))
    return dataclasses.replace(
        cp, probes=probes, started=True, ready="readiness" not in probes or cp.ready
    )


def _restart(
    cp: ContainerProbes, reason: str, s: ProbeState, result: ProbeResult
) -> tuple[ContainerProbes, list[Verdict]]:
    what = "startup" if reason == STARTUP_FAILED else "liveness"
    message = f"{what} probe failed {s.failures} times: {result.message}".rstrip(": ")
    verdicts: list[Verdict] = [Ready(False)] if cp.ready else []
    verdicts.append(Restart(reason, message))
    return dataclasses.replace(cp, ready=False, restarting=True), verdicts


def observe(
    cp: ContainerProbes, ticket: Ticket, result: ProbeResult, now: float
) -> tuple[ContainerProbes, list[Verdict]]:
    """Apply one probe result; return the new state and what the agent must do about it."""
    s = cp.probes.get(ticket.kind)
    stale = ticket.started_at != cp.started_at or s is None or ticket.seq != s.seq
    if stale or cp.restarting or s is None or not s.in_flight:
        return cp, []
    s = _record(s, result)
    cp = _with(cp, s)
    if ticket.kind == "startup":
        if s.healthy and s.successes:
            before = cp.ready
            cp = _on_startup(cp, s, now)
            return cp, [Ready(True)] if cp.ready and not before else []
        if s.failures >= s.spec.failure_threshold:
            return _restart(cp, STARTUP_FAILED, s, result)
        return cp, []
    if ticket.kind == "liveness":
        if not s.healthy:
            return _restart(cp, LIVENESS_FAILED, s, result)
        return cp, []
    if s.healthy != cp.ready:
        return dataclasses.replace(cp, ready=s.healthy), [Ready(s.healthy)]
    return cp, []
