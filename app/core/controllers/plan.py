"""The writes a controller asks for, and the small vocabulary controllers share.

A plan is data, not actions: the worker that applies it decides how (one transaction, optimistic
concurrency through ``resourceVersion``), and tests apply it to in-memory lists. What applying
did comes back as an ``Outcome``: how many children exist because of it, and every failure on
the way, classified (``app.core.errors.classify``), never swallowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from app.core.errors import ErrorKind, Failure
from app.core.kinds import API_VERSION

Obj = dict[str, Any]


class Delete(NamedTuple):
    """An object to delete, named precisely: the uid guards against deleting a namesake
    created after the controller read the old one."""

    kind: str
    namespace: str
    name: str
    uid: str


class Evict(NamedTuple):
    """A pod the platform takes away (reclaim, a silent node): marked ``DisruptionTarget=True``
    with ``message`` (unless ``mark`` is False: it is terminating already), then deleted with
    ``grace_seconds`` (``None``: the pod's own), guarded by its uid."""

    namespace: str
    name: str
    uid: str
    message: str
    grace_seconds: int | None = None
    mark: bool = True


class Note(NamedTuple):
    """An Event about the reconciled object, recorded once the plan's writes are applied.
    ``distinct`` keeps one row per message rather than per reason."""

    reason: str
    message: str
    type: str = "Normal"
    distinct: bool = False


@dataclass(frozen=True)
class Plan:
    """The writes one reconcile asks for.

    ``creates`` are full objects (``metadata.name`` or ``metadata.generateName``, labels,
    ownerReferences); ``updates`` are whole objects whose spec or metadata changed, carrying
    the ``metadata.resourceVersion`` they were read at so a concurrent change fails the write;
    ``status`` is the owner's new status (``None`` when unchanged; see
    ``status_assumes_writes``); ``requeue_after`` is how many
    seconds from now the controller wants to look again even if nothing changes; ``events``
    are what a human would look for about the reconciled object (they accompany writes).
    """

    creates: tuple[Obj, ...] = ()
    deletes: tuple[Delete, ...] = ()
    updates: tuple[Obj, ...] = ()
    status: Obj | None = None
    requeue_after: float | None = None
    events: tuple[Note, ...] = ()
    # The status counts the plan's writes as done (a Job's active pods, a CronJob's
    # lastScheduleTime): written only if they all happen. Otherwise the status describes what
    # the reconcile observed, which stays true whatever the writes do.
    status_assumes_writes: bool = False
    # Pods taken away after the other writes: ``eviction_reason`` is the DisruptionTarget
    # condition's reason; ``eviction_event``, if set, the reason of a Warning Event on each pod.
    evictions: tuple[Evict, ...] = ()
    eviction_reason: str = ""
    eviction_event: str | None = None
    # The status is written before anything else, and nothing else is written if it fails: a
    # node's batch figure must be in force before pods are evicted to fit it.
    status_first: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to write (a requeue is not a write)."""
        writes = self.creates or self.deletes or self.updates or self.evictions
        return not writes and self.status is None


# The order in which an outcome's failures name its result: the one an operator must see first.
_WORST = (
    ErrorKind.PERMANENT,
    ErrorKind.REFUSED,
    ErrorKind.UNSCHEDULABLE,
    ErrorKind.CONFLICT,
    ErrorKind.TEMPORARY,
)


@dataclass(frozen=True)
class Outcome:
    """What applying one plan (or a whole reconcile) did.

    ``wanted`` children were asked for and ``created`` of them exist now because of this
    apply; ``failures`` are every write that did not happen, classified; ``status_written`` is
    False when the plan's status was dropped (creates it assumed were refused) or lost a race;
    ``requeue_after`` is the plan's own timed look; ``gone`` means the owner no longer exists.
    """

    wanted: int = 0
    created: int = 0
    deleted: int = 0
    status_written: bool = False
    failures: tuple[Failure, ...] = ()
    requeue_after: float | None = None
    gone: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def result(self) -> str:
        """``ok``, or the worst failure's kind (``refused``, ``conflict``, ...)."""
        kinds = {f.kind for f in self.failures}
        return next((k.value for k in _WORST if k in kinds), "ok")

    @property
    def retry_after(self) -> float | None:
        """Seconds until the failures ask to be tried again (the soonest); ``None`` when none
        asks for a retry of its own."""
        delays = [f.delay for f in self.failures if f.delay is not None]
        return min(delays) if delays else None

    @property
    def next_look(self) -> float | None:
        """When to reconcile again: the sooner of the retry and the plan's timed look."""
        times = [t for t in (self.retry_after, self.requeue_after) if t is not None]
        return min(times) if times else None

    def merge(self, other: Outcome) -> Outcome:
        """Two outcomes as one (a tick that applied several plans)."""
        looks = [t for t in (self.requeue_after, other.requeue_after) if t is not None]
        return Outcome(
            self.wanted + other.wanted,
            self.created + other.created,
            self.deleted + other.deleted,
            self.status_written or other.status_written,
            self.failures + other.failures,
            min(looks) if looks else None,
            self.gone and other.gone,
        )

    @classmethod
    def failed(cls, failure: Failure) -> Outcome:
        return cls(failures=(failure,))


# ------------------------------------------------------------------------------ shared helpers


def owner_reference(owner: Obj) -> Obj:
    """The controller reference a child carries, so the owner finds it again by uid and the
    garbage collector deletes it with its owner."""
    meta = owner["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Obj) -> str | None:
    """The uid of the object's controlling owner, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            uid = ref.get("uid")
            return str(uid) if uid is not None else None
    return None


def is_at_most_one(template: Obj) -> bool:
    """Whether a pod template (or a pod) declares that two copies must never run at once."""
    return (template.get("spec") or {}).get("atMostOne") is True


def is_deleting(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def delete_of(obj: Obj) -> Delete:
    meta = obj["metadata"]
    return Delete(obj["kind"], meta.get("namespace", ""), meta["name"], str(meta["uid"]))


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch for an RFC 3339 timestamp; ``None`` if absent or unreadable."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def format_time(seconds: float) -> str:
    """RFC 3339 in UTC with second precision, as the store prints timestamps."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_ready_since(pod: Obj) -> float | None:
    """When the pod last became Ready, or ``None`` if it is not Ready now.

    A Ready condition without a readable time counts as ready since the epoch: it is ready,
    and nothing says for how long, so waiting would never end."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            if cond.get("status") != "True":
                return None
            since = parse_time(cond.get("lastTransitionTime"))
            return since if since is not None else 0.0
    return None


def available_at(pod: Obj, min_ready_seconds: int) -> float | None:
    """The time the pod counts as available (Ready for ``minReadySeconds``); ``None`` if it
    is not Ready."""
    since = pod_ready_since(pod)
    return None if since is None else since + min_ready_seconds
