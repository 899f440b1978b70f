"""The reclaim controller as a pure function: how much a node lends to batch, and who must go.

Production pods reserve capacity by their requests and usually use much less; ADR 0009 lets
batch pods borrow the difference through ``status.batchAllocatable``. This module decides that
figure from the usage samples the node agents report (ADR 0021)::

    batchAllocatable = allocatable + productionRequests - productionUsage - margin

per resource (cpu millicores, memory bytes), where ``productionUsage`` is the larger of the
p95 of production's per-sample usage over the last hour and the latest sample (so a rise counts
at once), ``margin`` is 10 % of allocatable, and the figure is clamped to
``[0, allocatable + productionRequests]``. Without a recent sample the figure is removed: no
borrowing without data. When the room held on the node no longer fits under the figure, batch
pods are evicted, lowest priority first, then most recently started; production never is.

Called by ``workers.controllers.reclaim`` with the Node (``resourceVersion`` = row version),
the pods holding room on it (requests as the allocation triggers count them) and the node's
usage samples, reduced to production's sums (:class:`Series`); the shell applies the
returned :class:`ReclaimPlan`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.controllers.plan import Evict, Note
from app.core.errors import StatusError
from app.core.priority import PRODUCTION_THRESHOLD
from app.core.quantity import cpu_millis, format_bytes, format_millis, to_bytes

Obj = dict[str, Any]
FIELD = "batchAllocatable"
EVICTED = "Evicted"  # on each pod taken back
RECLAIMED = "Reclaimed"  # on the node, when batch pods had to go
SHOWN = 10  # evicted pods named in the node's Event


@dataclass(frozen=True)
class Config:
    threshold: int = PRODUCTION_THRESHOLD  # the scheduler's production band
    window_seconds: float = 3600.0  # the p95 is taken over this much history
    stale_seconds: float = 120.0  # no sample this recent: no figure
    quantile: float = 0.95
    margin: float = 0.10  # of allocatable
    hysteresis: float = 0.02  # of allocatable: smaller raises are not written
    memory_granule: int = 1 << 20  # figures are rounded down to whole MiB


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_millis: int
    memory_bytes: int

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_millis + other.cpu_millis, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_millis - other.cpu_millis, self.memory_bytes - other.memory_bytes)

    def fits(self, ceiling: Resources) -> bool:
        return self.cpu_millis <= ceiling.cpu_millis and self.memory_bytes <= ceiling.memory_bytes

    def quantities(self) -> Obj:
        return {"cpu": format_millis(self.cpu_millis), "memory": format_bytes(self.memory_bytes)}


ZERO = Resources(0, 0)


@dataclass(frozen=True, slots=True)
class PodUse:
    """Usage at one priority in one sample: one pod's, or (in the usage store's history) the
    summed use of the node's pods of that priority."""

    priority: int
    cpu_millis: int
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class Sample:
    """One usage sample of the node: when (seconds since the epoch) and each pod's usage."""

    at: float
    pods: tuple[PodUse, ...]


@dataclass(frozen=True, slots=True)
class Series:
    """A node's samples reduced to what the figure needs: per sample its time and production's
    summed cpu millicores and memory bytes, as parallel sequences (numpy arrays from the usage
    store: the controller reads an hour of every node every 10 s)."""

    at: Sequence[float] | np.ndarray
    cpu_millis: Sequence[int] | np.ndarray
    memory_bytes: Sequence[int] | np.ndarray


NO_SAMPLES = Series((), (), ())


@dataclass(frozen=True, slots=True)
class PodRoom:
    """A pod holding room on the node (bound, not Succeeded or Failed)."""

    namespace: str
    name: str
    uid: str
    priority: int
    requests: Resources
    started: float  # seconds since the epoch: start time, else creation time
    deleting: bool = False


# A batch pod to take back: marked and deleted with its own grace period by the applier.
Eviction = Evict


@dataclass(frozen=True)
class ReclaimPlan:
    """``status``: the node's whole new status (only ``batchAllocatable`` differs), ``None``
    when unchanged; ``evictions``: batch pods to mark ``DisruptionTarget`` and delete with
    their grace period; ``events``: about the node; ``figure``: the batch ceiling in force once
    the plan is applied (``None``: absent, i.e. allocatable)."""

    status: Obj | None = None
    evictions: tuple[Eviction, ...] = ()
    events: tuple[Note, ...] = ()
    figure: Resources | None = None

    @property
    def empty(self) -> bool:
        return self.status is None and not self.evictions


# ------------------------------------------------------------------------------ the figure


def percentile(values: Sequence[int] | np.ndarray, q: float) -> int:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of a non-empty sequence."""
    arr = np.asarray(values)
    k = max(0, math.ceil(q * len(arr)) - 1)
    return int(np.partition(arr, k)[k])


def production_sum(sample: Sample, threshold: int) -> Resources:
    cpu = mem = 0
    for p in sample.pods:
        if p.priority >= threshold:
            cpu += p.cpu_millis
            mem += p.memory_bytes
    return Resources(cpu, mem)


def production_series(samples: Iterable[Sample], threshold: int) -> Series:
    """Samples reduced to production's summed use, as the usage store hands them over."""
    ordered = sorted(samples, key=lambda s: s.at)
    sums = [production_sum(s, threshold) for s in ordered]
    return Series(
        [s.at for s in ordered], [u.cpu_millis for u in sums], [u.memory_bytes for u in sums]
    )


def production_usage(series: Series, now: float, cfg: Config) -> Resources | None:
    """max(p95 over the window, latest) per resource; ``None`` without a recent sample."""
    at = np.asarray(series.at, dtype=np.float64)
    recent = np.flatnonzero(at > now - cfg.window_seconds)
    if not len(recent):
        return None
    latest = recent[np.argmax(at[recent])]
    if at[latest] < now - cfg.stale_seconds:
        return None
    cpu, mem = np.asarray(series.cpu_millis), np.asarray(series.memory_bytes)
    p_cpu = percentile(cpu[recent], cfg.quantile)
    p_mem = percentile(mem[recent], cfg.quantile)
    return Resources(max(p_cpu, int(cpu[latest])), max(p_mem, int(mem[latest])))


def compute_figure(
    allocatable: Resources, production_requests: Resources, usage: Resources, cfg: Config
) -> Resources:
    """The batch ceiling by the formula, clamped and rounded down (rounding is conservative)."""
    ceiling = allocatable + production_requests
    margin = Resources(
        round(allocatable.cpu_millis * cfg.margin), round(allocatable.memory_bytes * cfg.margin)
    )
    raw = ceiling - usage - margin
    cpu = min(max(raw.cpu_millis, 0), ceiling.cpu_millis)
    mem = min(max(raw.memory_bytes, 0), ceiling.memory_bytes)
    return Resources(cpu, mem - mem % cfg.memory_granule)


def worth_writing(
    current: Resources | None, desired: Resources | None, allocatable: Resources, cfg: Config
) -> bool:
    """Lowering and removal are written at once; a raise only past the hysteresis band."""
    if current is None or desired is None:
        return current != desired
    band = Resources(
        math.floor(allocatable.cpu_millis * cfg.hysteresis),
        math.floor(allocatable.memory_bytes * cfg.hysteresis),
    )
    if not current.fits(desired):  # lowered, in either resource
        return True
    moved = desired - current
    return moved.cpu_millis > band.cpu_millis or moved.memory_bytes > band.memory_bytes


# ------------------------------------------------------------------------------ evictions


def eviction_order(pods: Iterable[PodRoom], threshold: int) -> list[PodRoom]:
    """Batch pods that may be evicted, first to go first: lowest priority, then most
    recently started (uid breaks ties so the order replays)."""
    live = [p for p in pods if p.priority < threshold and not p.deleting]
    return sorted(live, key=lambda p: (p.priority, -p.started, p.uid))


def held(pods: Iterable[PodRoom]) -> Resources:
    """The summed requests of ``pods``."""
    total = ZERO
    for p in pods:
        total += p.requests
    return total


def victims(pods: Sequence[PodRoom], ceiling: Resources, threshold: int) -> list[PodRoom]:
    """The batch pods to evict so the room held fits under ``ceiling``: taken in eviction
    order while something overflows (a pod that frees none of an overflowing resource is
    passed over), then spared again, most important first, where the others suffice."""
    # Every production pod counts (a terminating one still runs and its usage is in the
    # samples, and its requests are in the figure too, so the two cancel); a batch pod already
    # on its way out does not, or the next reconcile would evict another in its place.
    counted = [p for p in pods if p.priority >= threshold or not p.deleting]
    total = held(counted)
    chosen: list[PodRoom] = []
    for pod in eviction_order(counted, threshold):
        if total.fits(ceiling):
            break
        over_cpu = total.cpu_millis > ceiling.cpu_millis and pod.requests.cpu_millis > 0
        over_mem = total.memory_bytes > ceiling.memory_bytes and pod.requests.memory_bytes > 0
        if over_cpu or over_mem:
            chosen.append(pod)
            total -= pod.requests
    for pod in reversed(list(chosen)):
        if (total + pod.requests).fits(ceiling):
            chosen.remove(pod)
            total += pod.requests
    return chosen


# ------------------------------------------------------------------------------ reconcile


def _resources(table: Any, fallback: Resources | None = None) -> Resources | None:
    """cpu and memory from a quantity map; a missing one falls back, an unreadable one fails."""
    if not isinstance(table, dict):
        return None
    try:
        cpu = cpu_millis(table["cpu"]) if "cpu" in table else None
        mem = to_bytes(table["memory"]) if "memory" in table else None
    except (StatusError, ValueError, TypeError):
        return None
    if fallback is not None:
        cpu = fallback.cpu_millis if cpu is None else cpu
        mem = fallback.memory_bytes if mem is None else mem
    return None if cpu is None or mem is None else Resources(cpu, mem)


def desired_figure(
    allocatable: Resources, pods: Sequence[PodRoom], series: Series, now: float,
    cfg: Config,
) -> Resources | None:  # fmt: skip
    usage = production_usage(series, now, cfg)
    if usage is None:
        return None
    production = held(p for p in pods if p.priority >= cfg.threshold)
    return compute_figure(allocatable, production, usage, cfg)


def reconcile(
    node: Obj, pods: Sequence[PodRoom], series: Series, now: float, cfg: Config
) -> ReclaimPlan:
    """The figure to write (if any) and the batch pods to evict so the node's room fits it."""
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    status = status or {}
    allocatable = _resources(status.get("allocatable"))
    if allocatable is None or (node.get("metadata") or {}).get("deletionTimestamp"):
        return ReclaimPlan()
    current = _resources(status.get(FIELD), allocatable) if FIELD in status else None
    desired = desired_figure(allocatable, pods, series, now, cfg)
    new_status = None
    if worth_writing(current, desired, allocatable, cfg):
        new_status = {k: v for k, v in status.items() if k != FIELD}
        if desired is not None:
            new_status[FIELD] = desired.quantities()
        current = desired
    ceiling = allocatable if current is None else current
    chosen = victims(pods, ceiling, cfg.threshold)
    node_name = str((node.get("metadata") or {}).get("name", ""))
    limit = f"cpu {format_millis(ceiling.cpu_millis)}, memory {format_bytes(ceiling.memory_bytes)}"
    evictions = tuple(
        Eviction(
            p.namespace, p.name, p.uid,
            f"reclaimed for production on node {node_name}: batch-allocatable is {limit}",
        )
        for p in chosen
    )  # fmt: skip
    events: tuple[Note, ...] = ()
    if evictions:
        shown = ", ".join(f"{e.namespace}/{e.name}" for e in evictions[:SHOWN])
        more = f" and {len(evictions) - SHOWN} more" if len(evictions) > SHOWN else ""
        message = f"batch-allocatable is {limit}: evicted {shown}{more}"
        events = (Note(RECLAIMED, message, "Warning"),)
    return ReclaimPlan(new_status, evictions, events, current)
