"""What the garbage collector and the namespace controller delete, decided without I/O.

Both controllers remove many objects at once: an owner's dependents once the owner is gone (or
is waiting for them in foreground deletion), a namespace's contents once it is being deleted.
Their shells (``workers/controllers/garbage.py``, ``workers/controllers/namespace.py``) read
candidates in batches of ``BATCH`` rows and ask ``split`` which of them to delete at once,
which to mark deleting (finalizers, or a pod on a node that must be given its grace period) and
which only lose the owner's reference (they have another owner that still exists). Each part
of a batch is one statement, so no transaction grows with the number of dependents.

``graceful_seconds`` is the one rule for whether a deleted pod waits for its node; the store's
single-object delete uses it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

BATCH = 5000  # rows per statement: bounds every transaction of a sweep
FOREGROUND = "foregroundDeletion"
DEFAULT_GRACE_SECONDS = 30
WAIT_SECONDS = 1.0  # how soon to look again while dependents are terminating on their own
TERMINAL = ("Succeeded", "Failed")


def graceful_seconds(
    kind: str, spec: dict[str, Any] | None, phase: str | None, grace: int | None
) -> int | None:
    """The grace period a deleted object is given before it goes, or ``None`` when it goes
    now: only a pod on a node that has not finished is given one (its agent stops it, then
    confirms), as Kubernetes does; ``grace`` is the one the deleter asked for, if any."""
    spec = spec or {}
    if kind != "Pod" or not spec.get("nodeName") or phase in TERMINAL:
        return None
    if grace is None:
        grace = int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    return grace if grace > 0 else None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One live object a sweep may delete, as much of it as the decision needs.

    ``grace``: the period it must be given (``graceful_seconds``); ``shared``: another of its
    owners still exists, so it stays and only loses the reference to the one that went."""

    uid: str
    row_version: int
    finalizers: tuple[str, ...] = ()
    grace: int | None = None
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of candidates sorted by what happens to them."""

    delete: tuple[Candidate, ...] = ()
    mark: tuple[Candidate, ...] = ()
    release: tuple[Candidate, ...] = ()

    def __len__(self) -> int:
        return len(self.delete) + len(self.mark) + len(self.release)


def split(candidates: list[Candidate]) -> Batch:
    """Sort one batch: shared dependents are released, objects with finalizers or a grace
    period are marked deleting, the rest are deleted now."""
    delete, mark, release = [], [], []
    for c in candidates:
        if c.shared:
            release.append(c)
        elif c.finalizers or c.grace is not None:
            mark.append(c)
        else:
            delete.append(c)
    return Batch(tuple(delete), tuple(mark), tuple(release))


# ------------------------------------------------------------------------ the garbage collector


@dataclass(frozen=True, slots=True)
class OwnerView:
    """The owner a garbage-collector key names, as found (``None`` in ``intent`` if gone)."""

    deleting: bool
    finalizers: tuple[str, ...]
    grace: int | None = None  # a pod still waiting for its node


class Intent(Enum):
    NOTHING = "nothing"  # the owner lives: its dependents stay
    COLLECT = "collect"  # the owner is gone or going: its dependents go (or lose the reference)
    FOREGROUND = "foreground"  # the owner waits for its dependents, then goes
    FINISH = "finish"  # the owner is deleting and nothing holds it any more


def intent(owner: OwnerView | None) -> Intent:
    """What to do about an owner's dependents. An owner deleted in the background but held by
    a finalizer already has its dependents collected (the store always did so, at marking)."""
    if owner is None:
        return Intent.COLLECT
    if not owner.deleting:
        return Intent.NOTHING
    if FOREGROUND in owner.finalizers:
        return Intent.FOREGROUND
    if not owner.finalizers:
        return Intent.FINISH if owner.grace is None else Intent.NOTHING
    return Intent.COLLECT


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep of an owner's dependents left: ``more``: live candidates not reached yet
    (the time budget ran out); ``left``: dependents still there, terminating ones included;
    ``missed``: candidates that changed between read and write (read again shortly)."""

    more: bool
    left: int
    missed: bool = False


@dataclass(frozen=True, slots=True)
class GcPlan:
    finish: bool = False  # remove the owner's foregroundDeletion finalizer (and the owner)
    requeue_after: float | None = None


def after_sweep(what: Intent, swept: Swept) -> GcPlan:
    """The next step once a reconcile's batches are done."""
    if what is Intent.FINISH:
        return GcPlan(finish=True)
    if swept.more:
        return GcPlan(requeue_after=0.0)
    if swept.missed:
        return GcPlan(requeue_after=WAIT_SECONDS)
    if what is Intent.FOREGROUND:
        return GcPlan(finish=True) if swept.left == 0 else GcPlan(requeue_after=WAIT_SECONDS)
    return GcPlan()  # collected: what is left is terminating and goes on its own


def key_name(kind: str, uid: str) -> str:
    """The name part of a garbage-collector key: the owner's kind and uid (its name may be
    taken again by a new object; the dependents name the uid)."""
    return f"{kind}:{uid}"


def parse_key_name(name: str) -> tuple[str, str]:
    kind, _, uid = name.partition(":")
    return kind, uid
