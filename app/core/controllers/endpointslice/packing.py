"""Where each endpoint goes, with as few slice writes as possible, and no slice written more
than once per ``interval`` (the EndpointSlice controller's placement; pure, called by
``app.core.controllers.endpointslice.reconcile``).

Rules, in order:

1. A slice written less than ``interval`` ago is **hot**: it is left exactly as it is this
   time, and the reconcile looks again when it cools, by which time any further changes to it
   have gathered into one write. Any other slice is **cool**.
2. An endpoint stays in the cool slice it is in (updated in place if its conditions, node or
   zone changed); one the service no longer has, or whose ports now differ from the slice's,
   is dropped from it. A cool slice left empty is **free**: any port group may take it.
3. New endpoints (in no slice) fill, per port group: cool slices already being rewritten, then
   free slices, then cool unchanged slices with room, fullest first. What is left waits for
   the hot slices' room, if they have any; only what does not fit there goes into new slices.
4. Free slices nobody took are deleted, except that a service with no endpoints keeps one
   empty slice (see ADR 0037).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.controllers.endpointslice.endpoints import (
    Desired,
    Ports,
    endpoint_key,
    endpoint_order,
    ports_of,
)

Obj = dict[str, Any]
LAST_WRITE = "endpoints.quaymaster.io/last-write"


@dataclass(eq=False)
class Slot:
    """One slice during placement: an existing one (``obj``) or one to create."""

    obj: Obj | None
    ports: Ports
    endpoints: dict[str, Obj] = field(default_factory=dict)
    cools_at: float | None = None  # hot until then (``None``: cool)
    dirty: bool = False

    @property
    def hot(self) -> bool:
        return self.cools_at is not None

    @property
    def name(self) -> str:
        return "" if self.obj is None else str(self.obj["metadata"].get("name", ""))


@dataclass
class Placement:
    """The slices as placement left them, and when to look again (``None``: no change waits)."""

    writes: list[Slot]  # existing slices whose content changed (cool ones only)
    creates: list[Slot]
    deletes: list[Obj]
    wait: float | None


def last_write(slice_obj: Obj) -> float | None:
    """When the controller last wrote this slice (its annotation), or ``None``."""
    raw = ((slice_obj.get("metadata") or {}).get("annotations") or {}).get(LAST_WRITE)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def place(
    want: dict[str, Desired], slices: list[Obj], now: float, *, cap: int, interval: float
) -> Placement:
    slots = [_slot(s, now, interval) for s in sorted(slices, key=_name)]
    waits: list[float] = []
    placed: set[str] = set()
    lone = len(slots) == 1 and not want  # the placeholder: empty is what it should be
    for slot in slots:
        if slot.hot:
            if not lone and _would_change(slot, want, placed):
                waits.append(slot.cools_at or now)
            placed.update(slot.endpoints)
        else:
            _keep(slot, want, placed)
    creates: list[Slot] = []
    for ports, keys in _new_by_ports(want, placed).items():
        rest = _fill(ports, keys, slots, want, cap)
        room = [s for s in slots if s.hot and s.ports == ports and len(s.endpoints) < cap]
        wait_for = min(len(rest), sum(cap - len(s.endpoints) for s in room))
        if wait_for:  # these go into the hot slices' next write, batched with their changes
            waits.append(min(s.cools_at or now for s in room))
            rest = rest[wait_for:]
        for i in range(0, len(rest), cap):
            chunk = rest[i : i + cap]
            creates.append(Slot(None, ports, {k: want[k].endpoint for k in chunk}, dirty=True))
    deletes = _settle_free(slots, creates, bool(want))
    writes = [s for s in slots if s.dirty and not s.hot and s.obj is not None and s not in deletes]
    wait = max(0.0, min(waits) - now) if waits else None
    return Placement(writes, creates, [s.obj for s in deletes if s.obj is not None], wait)


def _name(obj: Obj) -> str:
    return str(obj["metadata"].get("name", ""))


def _slot(obj: Obj, now: float, interval: float) -> Slot:
    endpoints: dict[str, Obj] = {}
    duplicated = False
    for ep in obj.get("endpoints") or []:
        key = endpoint_key(ep)
        duplicated = duplicated or key in endpoints
        endpoints.setdefault(key, ep)
    written = last_write(obj)
    cools_at = written + interval if written is not None and now - written < interval else None
    return Slot(obj, ports_of(obj), endpoints, cools_at, duplicated)


def _would_change(slot: Slot, want: dict[str, Desired], placed: set[str]) -> bool:
    """Whether a hot slot's content is stale: an endpoint gone, changed, moved or doubled."""
    if not slot.endpoints:
        return True  # an empty slice is deleted or refilled
    for key, ep in slot.endpoints.items():
        d = want.get(key)
        if d is None or key in placed or d.ports != slot.ports or d.endpoint != ep:
            return True
    return slot.dirty


def _keep(slot: Slot, want: dict[str, Desired], placed: set[str]) -> None:
    """Rule 2 for a cool slot: keep its endpoints that are still wanted here, as wanted."""
    kept: dict[str, Obj] = {}
    for key, ep in slot.endpoints.items():
        d = want.get(key)
        if d is None or key in placed or d.ports != slot.ports:
            slot.dirty = True
            continue
        if d.endpoint != ep:
            slot.dirty = True
        kept[key] = d.endpoint
        placed.add(key)
    slot.endpoints = kept


def _new_by_ports(want: dict[str, Desired], placed: set[str]) -> dict[Ports, list[str]]:
    groups: dict[Ports, list[str]] = {}
    fresh = sorted((d for k, d in want.items() if k not in placed),
                   key=lambda d: endpoint_order(d.endpoint))  # fmt: skip
    for d in fresh:
        groups.setdefault(d.ports, []).append(d.key)
    return groups


def _fill(
    ports: Ports, keys: list[str], slots: list[Slot], want: dict[str, Desired], cap: int
) -> list[str]:
    """Rule 3 over cool slots; the keys that did not fit."""
    cool = [s for s in slots if not s.hot]
    same = [s for s in cool if s.ports == ports and s.endpoints]
    order = (
        sorted((s for s in same if s.dirty), key=lambda s: -len(s.endpoints))
        + [s for s in cool if not s.endpoints]
        + sorted((s for s in same if not s.dirty), key=lambda s: -len(s.endpoints))
    )
    rest = list(keys)
    for slot in order:
        if not rest:
            break
        if not slot.endpoints and slot.ports != ports:
            slot.ports = ports  # a free slice taken by this port group
        room = cap - len(slot.endpoints)
        if room <= 0 or slot.ports != ports:
            continue
        take, rest = rest[:room], rest[room:]
        slot.endpoints.update((k, want[k].endpoint) for k in take)
        slot.dirty = True
    return rest


def _settle_free(slots: list[Slot], creates: list[Slot], any_wanted: bool) -> list[Slot]:
    """Rule 4: the free slots to delete. With no endpoint anywhere, one slice stays, empty and
    without ports, so a consumer tells "no endpoints" from "not yet reconciled"."""
    free = [s for s in slots if not s.hot and not s.endpoints]
    others = [s for s in slots if s.hot or s.endpoints] + creates
    if others or any_wanted:
        return free
    if not free:
        creates.append(Slot(None, (), {}, dirty=True))  # the placeholder
        return []
    keep, *rest = free
    if keep.ports:
        keep.ports, keep.dirty = (), True
    return rest
