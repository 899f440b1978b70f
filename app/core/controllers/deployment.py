"""The Deployment controller: roll a pod template out through ReplicaSets.

A Deployment never touches pods itself. Each distinct pod template gets one ReplicaSet, named
after a hash of the template; the ReplicaSet whose template matches ``spec.template`` is the
*new* one and every other one it controls is *old*. Rolling out is resizing those
ReplicaSets: the new one grows while the old ones shrink, within the bounds the strategy sets.
This follows the Kubernetes controller closely, so its documented behaviour carries over:

* RollingUpdate keeps at most ``replicas + maxSurge`` pods asked for and scales old
  ReplicaSets down only as far as the *available* pods (from the ReplicaSets' status) allow,
  never below ``replicas - maxUnavailable``;
* Recreate scales every old ReplicaSet to zero and creates the new pods only once no old pod
  is left running;
* a change of ``spec.replicas`` during a rollout (or while paused) is spread over the active
  ReplicaSets in proportion to their size;
* a paused Deployment still scales but makes no rollout progress and has no deadline;
* putting an old template back makes its ReplicaSet the new one again (a rollback), with a new
  revision number;
* old ReplicaSets scaled to zero beyond ``revisionHistoryLimit`` are deleted, oldest first.

Kubernetes takes several syncs to get from one state to the next when nothing is observed in
between (scale the new ReplicaSet up, then the old ones down, then the new one up again...).
Here those steps repeat within one call until they change nothing, so one plan takes the
Deployment as far as the observed pods allow and a second call with the same observations asks
for nothing. That is safe because every step reasons from the sizes already asked for and
availability that only the ReplicaSets' status can raise.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field

from app.core.controllers.plan import (
    Delete,
    Note,
    Obj,
    Plan,
    controller_uid,
    delete_of,
    format_time,
    is_at_most_one,
    is_deleting,
    owner_reference,
    parse_time,
)
from app.core.controllers.replicaset import TEMPLATE_HASH_LABEL
from app.core.kinds import API_VERSION

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"

PROGRESSING = "Progressing"
AVAILABLE = "Available"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
RS_UPDATED = "ReplicaSetUpdated"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"

# Enough for any real sequence of steps (each one grows the new ReplicaSet or shrinks an old
# one); the bound only guards against a bug turning into an endless loop.
_MAX_STEPS = 100


def reconcile(dep: Obj, replicasets: list[Obj], pods: list[Obj], now: float) -> Plan:
    """The writes that move ``dep``'s ReplicaSets one step further and its new status.

    ``replicasets`` and ``pods`` are those of the Deployment's namespace (any superset of its
    own will do: ownership is by controller uid). Pods are read only by Recreate, which waits
    for the old ones to be gone.
    """
    if is_deleting(dep):
        return Plan()
    d = _Spec.of(dep)
    owned = [
        rs
        for rs in replicasets
        if controller_uid(rs) == str(dep["metadata"]["uid"]) and not is_deleting(rs)
    ]
    template_h = template_hash(d.template)
    new, olds = split_new_and_old([_RS.of(rs) for rs in owned], template_h)
    conditions = copy.deepcopy((dep.get("status") or {}).get("conditions") or [])

    revision = max((rs.revision for rs in olds), default=0) + 1
    new_rollout = new is not None and new.revision < revision
    if new is not None and new_rollout:
        # A rollback: an old template came back, so its ReplicaSet is the newest revision.
        new.annotations[REVISION] = str(revision)
    if new is not None:
        new.min_ready = d.min_ready
    track_pause(conditions, d.paused, now)

    created = False
    for _ in range(_MAX_STEPS):
        before = _sizes(new, olds)
        if d.paused or is_scaling_event(d, new, olds):
            scale(d, new, olds)
        elif d.recreate:
            new = recreate_step(d, dep, new, olds, pods, template_h, revision)
        else:
            new = rolling_step(d, dep, new, olds, template_h, revision)
        created = created or (new is not None and new.obj is None)
        if _sizes(new, olds) == before:
            break

    if not d.paused and (created or new_rollout):
        reason = NEW_RS_CREATED if created else FOUND_NEW_RS
        assert new is not None
        set_condition(
            conditions,
            PROGRESSING,
            "True",
            reason,
            f'ReplicaSet "{new.name}" is progressing.',
            now,
            force=True,
        )
    status = compute_status(dep, d, new, olds, conditions, now)
    requeue = None if d.paused else sync_progress(dep, d, new, status, now)

    deletes: tuple[Delete, ...] = ()
    if d.paused or deployment_complete(dep, d, status):
        deletes = tuple(delete_of(rs.obj) for rs in history_to_delete(d, olds) if rs.obj)

    creates = tuple(rs.render_create(dep) for rs in [new] if rs is not None and rs.obj is None)
    updates = tuple(u for rs in [new, *olds] if rs is not None for u in rs.render_update())
    return Plan(
        creates=creates,
        deletes=deletes,
        updates=updates,
        status=status if status != (dep.get("status") or {}) else None,
        requeue_after=requeue,
        events=_events(dep, replicasets, creates, updates, status),
    )


def _events(dep: Obj, replicasets: list[Obj], creates: tuple[Obj, ...],
            updates: tuple[Obj, ...], status: Obj) -> tuple[Note, ...]:  # fmt: skip
    """Scaling of each ReplicaSet, and the rollout timing out."""
    notes = [
        Note("ScalingReplicaSet", f"Scaled up replica set {rs['metadata']['name']} to "
             f"{rs['spec']['replicas']}", distinct=True)
        for rs in creates
    ]  # fmt: skip
    sizes = {rs["metadata"]["uid"]: int((rs.get("spec") or {}).get("replicas", 1))
             for rs in replicasets}  # fmt: skip
    for rs in updates:
        before = sizes.get(rs["metadata"]["uid"], 0)
        after = int(rs["spec"]["replicas"])
        if after != before:
            word = "up" if after > before else "down"
            notes.append(Note("ScalingReplicaSet", f"Scaled {word} replica set "
                              f"{rs['metadata']['name']} to {after}", distinct=True))  # fmt: skip
    was = get_condition((dep.get("status") or {}).get("conditions") or [], PROGRESSING)
    now = get_condition(status.get("conditions") or [], PROGRESSING)
    if (
        now is not None
        and now.get("reason") == TIMED_OUT
        and (was or {}).get("reason") != TIMED_OUT
    ):
        notes.append(Note(TIMED_OUT, str(now.get("message", "")), "Warning"))
    return tuple(notes)


# ------------------------------------------------------------------------ spec and templates


@dataclass(frozen=True)
class _Spec:
    """The Deployment's spec as numbers (admission has defaulted every field)."""

    replicas: int
    template: Obj
    selector: Obj
    recreate: bool
    max_surge: int
    max_unavailable: int
    min_ready: int
    history_limit: int
    deadline: int
    paused: bool
    status_replicas: int

    @classmethod
    def of(cls, dep: Obj) -> _Spec:
        spec = dep.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        strategy = spec.get("strategy") or {}
        template = spec.get("template") or {}
        # An at-most-one template never surges: the old copies must be gone before new ones
        # start, which is what Recreate does.
        recreate = strategy.get("type") == "Recreate" or is_at_most_one(template)
        ru = strategy.get("rollingUpdate") or {}
        if recreate:
            surge, unavailable = 0, 0
        else:
            surge, unavailable = resolve_fenceposts(
                ru.get("maxSurge", "25%"), ru.get("maxUnavailable", "25%"), replicas
            )
        return cls(
            replicas=replicas,
            template=template,
            selector=spec.get("selector") or {},
            recreate=recreate,
            max_surge=surge,
            max_unavailable=min(unavailable, replicas),
            min_ready=int(spec.get("minReadySeconds") or 0),
            history_limit=int(spec.get("revisionHistoryLimit", 10)),
            deadline=int(spec.get("progressDeadlineSeconds", 600)),
            paused=bool(spec.get("paused")),
            status_replicas=int((dep.get("status") or {}).get("replicas") or 0),
        )


def scaled_value(value: int | str | None, total: int, round_up: bool) -> int:
    """An ``IntOrString`` resolved against ``total``: a percentage of it, rounded as asked."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    exact = percent * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)


def resolve_fenceposts(surge: int | str, unavailable: int | str, replicas: int) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` as pod counts: surge rounds up, unavailability rounds
    down (so a percentage never makes a small Deployment lose more than asked), and when
    both come out as zero one pod may be unavailable, or nothing could ever move."""
    s = scaled_value(surge, replicas, round_up=True)
    u = scaled_value(unavailable, replicas, round_up=False)
    if s == 0 and u == 0:
        u = 1
    return s, u


def template_hash(template: Obj) -> str:
    """A stable name for a pod template: 10 hex chars of the SHA-256 of its canonical JSON,
    ignoring the ``pod-template-hash`` label a ReplicaSet's copy carries."""
    t = copy.deepcopy(template)
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(TEMPLATE_HASH_LABEL, None)
    text = json.dumps(t, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# ----------------------------------------------------------------- ReplicaSets being resized


@dataclass(eq=False)
class _RS:
    """A ReplicaSet as this reconcile sees it: the stored object (``None`` for one created by
    this plan), the size and annotations asked for so far, and its observed status."""

    obj: Obj | None
    name: str
    replicas: int
    annotations: dict[str, str]
    min_ready: int
    template: Obj
    created: float
    status: Obj = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    selector: Obj = field(default_factory=dict)

    @classmethod
    def of(cls, rs: Obj) -> _RS:
        meta = rs["metadata"]
        spec = rs.get("spec") or {}
        return cls(
            obj=rs,
            name=meta["name"],
            replicas=int(spec.get("replicas", 1)),
            annotations=dict(meta.get("annotations") or {}),
            min_ready=int(spec.get("minReadySeconds") or 0),
            template=spec.get("template") or {},
            created=parse_time(meta.get("creationTimestamp")) or 0.0,
            status=rs.get("status") or {},
        )

    @property
    def revision(self) -> int:
        try:
            return int(self.annotations.get(REVISION, "0"))
        except ValueError:
            return 0

    def observed(self, key: str) -> int:
        return int(self.status.get(key) or 0)

    @property
    def available(self) -> int:
        """Available pods, never more than the size asked for: pods beyond it are about to
        be deleted, so they cannot be counted on."""
        return min(self.observed("availableReplicas"), self.replicas)

    def render_create(self, dep: Obj) -> Obj:
        meta = dep["metadata"]
        return {
            "apiVersion": API_VERSION,
            "kind": "ReplicaSet",
            "metadata": {
                "name": self.name,
                "namespace": meta.get("namespace", ""),
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
                "ownerReferences": [owner_reference(dep)],
            },
            "spec": {
                "replicas": self.replicas,
                "minReadySeconds": self.min_ready,
                "selector": self.selector,
                "template": self.template,
            },
        }

    def render_update(self) -> list[Obj]:
        """The stored object with the new size and annotations, or nothing if unchanged. The
        copy keeps ``metadata.resourceVersion``, so a concurrent change fails the write."""
        if self.obj is None:
            return []
        spec = self.obj.get("spec") or {}
        old_annotations = self.obj["metadata"].get("annotations") or {}
        if (
            self.replicas == spec.get("replicas", 1)
            and self.min_ready == int(spec.get("minReadySeconds") or 0)
            and self.annotations == old_annotations
        ):
            return []
        out = copy.deepcopy(self.obj)
        out["spec"]["replicas"] = self.replicas
        out["spec"]["minReadySeconds"] = self.min_ready
        out["metadata"]["annotations"] = dict(self.annotations)
        return [out]


def split_new_and_old(owned: list[_RS], template_h: str) -> tuple[_RS | None, list[_RS]]:
    """The new ReplicaSet is the one running ``spec.template`` (the oldest, should there be
    two); every other one is old."""
    owned = sorted(owned, key=lambda rs: (rs.created, rs.name))
    new = next((rs for rs in owned if template_hash(rs.template) == template_h), None)
    return new, [rs for rs in owned if rs is not new]


def new_replicaset(dep: Obj, d: _Spec, template_h: str, revision: int, replicas: int) -> _RS:
    """The ReplicaSet for the current template. Its selector and pods carry the template hash
    so that the Deployment's ReplicaSets never select each other's pods."""
    template = copy.deepcopy(d.template)
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), TEMPLATE_HASH_LABEL: template_h}
    selector = copy.deepcopy(d.selector)
    selector["matchLabels"] = {
        **(selector.get("matchLabels") or {}),
        TEMPLATE_HASH_LABEL: template_h,
    }
    rs = _RS(
        obj=None,
        name=f"{dep['metadata']['name']}-{template_h}",
        replicas=0,
        annotations={REVISION: str(revision)},
        min_ready=d.min_ready,
        template=template,
        created=math.inf,
        labels=dict(tmeta["labels"]),
        selector=selector,
    )
    scale_to(d, rs, replicas, force=True)
    return rs


def _sizes(new: _RS | None, olds: list[_RS]) -> tuple[int | None, ...]:
    return (None if new is None else new.replicas, *(rs.replicas for rs in olds))


def scale_to(d: _Spec, rs: _RS, replicas: int, *, force: bool = False) -> None:
    """Resize a ReplicaSet, recording the Deployment size it was sized for: a later mismatch
    between that record and ``spec.replicas`` is how a scaling event is recognised."""
    if rs.replicas == replicas and not force:
        return
    rs.replicas = max(replicas, 0)
    rs.annotations[DESIRED_REPLICAS] = str(d.replicas)
    rs.annotations[MAX_REPLICAS] = str(d.replicas + d.max_surge)


def _active(rss: list[_RS]) -> list[_RS]:
    return [rs for rs in rss if rs.replicas > 0]


# ---------------------------------------------------------------------------------- scaling


def is_scaling_event(d: _Spec, new: _RS | None, olds: list[_RS]) -> bool:
    """``spec.replicas`` changed since the active ReplicaSets were last sized."""
    for rs in _active([*([new] if new else []), *olds]):
        recorded = rs.annotations.get(DESIRED_REPLICAS)
        if recorded is not None and recorded != str(d.replicas):
            return True
    return False


def scale(d: _Spec, new: _RS | None, olds: list[_RS]) -> None:
    """Follow a change of ``spec.replicas`` without moving the rollout: a lone active
    ReplicaSet takes the new size; otherwise the difference is shared out in proportion to
    each active ReplicaSet's size, so a half-done rollout stays half done."""
    everyone = [*([new] if new else []), *olds]
    active = _active(everyone)
    lone: _RS | None = None
    if len(active) == 1:
        lone = active[0]
    elif not active:
        newest_old = max(olds, key=lambda rs: (rs.created, rs.name), default=None)
        lone = new if new is not None else newest_old
    if lone is not None:
        scale_to(d, lone, d.replicas)
        return
    if is_saturated(d, new):
        for rs in olds:
            scale_to(d, rs, 0)
        return
    if d.recreate:
        return
    allowed = d.replicas + d.max_surge if d.replicas > 0 else 0
    to_add = allowed - sum(rs.replicas for rs in active)
    # Largest first; on a tie the newer grows first and the older shrinks first.
    sign = 1 if to_add > 0 else -1
    active.sort(key=lambda rs: (-rs.replicas, -sign * rs.created, rs.name))
    sizes: dict[int, int] = {}
    added = 0
    for rs in active:
        share = proportion(d, rs, to_add, added)
        sizes[id(rs)] = rs.replicas + share
        added += share
    if active and to_add != 0:
        sizes[id(active[0])] += to_add - added
    for rs in active:
        scale_to(d, rs, max(sizes[id(rs)], 0), force=True)


def proportion(d: _Spec, rs: _RS, to_add: int, added: int) -> int:
    """This ReplicaSet's share of ``to_add``: its size scaled by how much the Deployment's
    maximum size changed since the ReplicaSet was last sized, capped by what is left."""
    if rs.replicas == 0 or to_add == 0 or to_add == added:
        return 0
    if d.replicas == 0:
        fraction = -rs.replicas
    else:
        try:
            annotated = int(rs.annotations.get(MAX_REPLICAS, d.status_replicas))
        except ValueError:
            annotated = d.status_replicas
        if annotated <= 0:
            return 0
        exact = rs.replicas * (d.replicas + d.max_surge) / annotated
        fraction = math.floor(exact + 0.5) - rs.replicas
    left = to_add - added
    return min(fraction, left) if to_add > 0 else max(fraction, left)


def is_saturated(d: _Spec, new: _RS | None) -> bool:
    """The new ReplicaSet alone serves the whole Deployment."""
    return (
        new is not None
        and new.replicas == d.replicas
        and new.annotations.get(DESIRED_REPLICAS) == str(d.replicas)
        and new.observed("availableReplicas") == d.replicas
    )


# ---------------------------------------------------------------------------- rolling update


def rolling_step(
    d: _Spec, dep: Obj, new: _RS | None, olds: list[_RS], template_h: str, revision: int
) -> _RS:
    """One rolling step: grow the new ReplicaSet into the surge allowance, then shrink the old
    ones as far as availability allows."""
    if new is None:
        new = new_replicaset(dep, d, template_h, revision, new_rs_size(d, 0, olds, 0))
    elif new.replicas > d.replicas:
        scale_to(d, new, d.replicas)
    else:
        scale_to(d, new, new_rs_size(d, new.replicas, olds, new.replicas))
    scale_down_old(d, new, olds)
    return new


def new_rs_size(d: _Spec, current_new: int, olds: list[_RS], new_size: int) -> int:
    """How big the new ReplicaSet may be: what fits under ``replicas + maxSurge`` counting
    every ReplicaSet's asked-for size, and never more than ``replicas``."""
    total = current_new + sum(rs.replicas for rs in olds)
    room = d.replicas + d.max_surge - total
    if room <= 0:
        return new_size
    return new_size + max(min(room, d.replicas - new_size), 0)


def scale_down_old(d: _Spec, new: _RS, olds: list[_RS]) -> None:
    """Shrink old ReplicaSets without letting availability fall below ``replicas -
    maxUnavailable``: first the pods that are not available anyway (they cost nothing), then
    available ones, oldest ReplicaSet first, only as far as available pods exceed the
    minimum. Pods of the new ReplicaSet that are not yet available count as unavailable."""
    if sum(rs.replicas for rs in olds) == 0:
        return
    min_available = d.replicas - d.max_unavailable
    everyone = [new, *olds]
    new_unavailable = new.replicas - new.available
    budget = sum(rs.replicas for rs in everyone) - min_available - new_unavailable
    if budget <= 0:
        return
    for rs in sorted(olds, key=lambda r: (r.created, r.name)):
        unhealthy = rs.replicas - rs.available
        if unhealthy <= 0 or budget <= 0:
            continue
        cut = min(unhealthy, budget)
        scale_to(d, rs, rs.replicas - cut)
        budget -= cut
    excess = sum(rs.available for rs in everyone) - min_available
    excess = min(excess, budget)
    for rs in sorted(olds, key=lambda r: (r.created, r.name)):
        if excess <= 0:
            break
        if rs.replicas == 0:
            continue
        cut = min(rs.replicas, excess)
        scale_to(d, rs, rs.replicas - cut)
        excess -= cut


# ---------------------------------------------------------------------------------- recreate


def recreate_step(
    d: _Spec,
    dep: Obj,
    new: _RS | None,
    olds: list[_RS],
    pods: list[Obj],
    template_h: str,
    revision: int,
) -> _RS | None:
    """Recreate: every old ReplicaSet to zero, then wait until none of their pods runs (two
    versions must never run side by side), then the new ReplicaSet at full size."""
    for rs in olds:
        scale_to(d, rs, 0)
    if old_pods_running(olds, pods):
        return new
    if new is None:
        return new_replicaset(dep, d, template_h, revision, d.replicas)
    scale_to(d, new, d.replicas)
    return new


def old_pods_running(olds: list[_RS], pods: list[Obj]) -> bool:
    """Any pod of an old ReplicaSet that may still run, terminating ones included."""
    if any(rs.observed("replicas") > 0 for rs in olds):
        return True
    uids = {str(rs.obj["metadata"]["uid"]) for rs in olds if rs.obj is not None}
    return any(
        controller_uid(p) in uids
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        for p in pods
    )


# ------------------------------------------------------------------------- history clean-up


def history_to_delete(d: _Spec, olds: list[_RS]) -> list[_RS]:
    """Old ReplicaSets beyond ``revisionHistoryLimit``, lowest revision first. Only those that
    are empty both as asked and as observed qualify: they are what a rollback would reuse."""
    idle = [
        rs
        for rs in olds
        if rs.replicas == 0
        and rs.obj is not None
        and (rs.obj.get("spec") or {}).get("replicas", 1) == 0
        and rs.observed("replicas") == 0
    ]
    surplus = len(idle) - d.history_limit
    if surplus <= 0:
        return []
    return sorted(idle, key=lambda rs: (rs.revision, rs.created, rs.name))[:surplus]


# ----------------------------------------------------------------------------------- status


def get_condition(conditions: list[Obj], kind: str) -> Obj | None:
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), None)


def set_condition(
    conditions: list[Obj],
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: float,
    *,
    force: bool = False,
) -> None:
    """Set a condition. An unchanged status and reason leave it alone unless ``force`` (the
    Progressing condition's ``lastUpdateTime`` records progress); an unchanged status keeps
    ``lastTransitionTime``."""
    current = get_condition(conditions, kind)
    if (
        current is not None
        and not force
        and current.get("status") == status
        and current.get("reason") == reason
    ):
        return
    stamp = format_time(now)
    cond = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }
    if current is not None:
        if current.get("status") == status and current.get("lastTransitionTime"):
            cond["lastTransitionTime"] = current["lastTransitionTime"]
        conditions[conditions.index(current)] = cond
    else:
        conditions.append(cond)


def track_pause(conditions: list[Obj], paused: bool, now: float) -> None:
    """Pausing suspends the progress deadline; resuming restarts its clock."""
    current = get_condition(conditions, PROGRESSING)
    if paused:
        set_condition(conditions, PROGRESSING, "Unknown", PAUSED, "Deployment is paused", now)
    elif current is not None and current.get("reason") == PAUSED:
        set_condition(conditions, PROGRESSING, "Unknown", RESUMED, "Deployment is resumed", now)


def compute_status(
    dep: Obj, d: _Spec, new: _RS | None, olds: list[_RS], conditions: list[Obj], now: float
) -> Obj:
    """Counts summed over the ReplicaSets' status, and the Available condition."""
    everyone = [*([new] if new else []), *olds]
    available = sum(rs.observed("availableReplicas") for rs in everyone)
    asked = sum(rs.replicas for rs in everyone)
    if available >= d.replicas - d.max_unavailable:
        set_condition(
            conditions,
            AVAILABLE,
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    else:
        set_condition(
            conditions,
            AVAILABLE,
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    status = dict(dep.get("status") or {})
    status.update(
        observedGeneration=int(dep["metadata"].get("generation") or 0),
        replicas=sum(rs.observed("replicas") for rs in everyone),
        updatedReplicas=new.observed("replicas") if new else 0,
        readyReplicas=sum(rs.observed("readyReplicas") for rs in everyone),
        availableReplicas=available,
        unavailableReplicas=max(asked - available, 0),
        conditions=conditions,
    )
    return status


def deployment_complete(dep: Obj, d: _Spec, status: Obj) -> bool:
    """Every pod runs the current template and is available, and no old pod is left."""
    return (
        status["updatedReplicas"] == d.replicas
        and status["replicas"] == d.replicas
        and status["availableReplicas"] == d.replicas
        and status["observedGeneration"] >= int(dep["metadata"].get("generation") or 0)
    )


def made_progress(old: Obj, new: Obj) -> bool:
    """More updated, ready or available pods than last time, or fewer old ones."""

    def count(s: Obj, key: str) -> int:
        return int(s.get(key) or 0)

    old_olds = count(old, "replicas") - count(old, "updatedReplicas")
    new_olds = count(new, "replicas") - count(new, "updatedReplicas")
    return (
        count(new, "updatedReplicas") > count(old, "updatedReplicas")
        or new_olds < old_olds
        or count(new, "readyReplicas") > count(old, "readyReplicas")
        or count(new, "availableReplicas") > count(old, "availableReplicas")
    )


def sync_progress(dep: Obj, d: _Spec, new: _RS | None, status: Obj, now: float) -> float | None:
    """Update the Progressing condition in ``status``; return when the deadline falls due.

    Progress (see ``made_progress``) moves ``lastUpdateTime``; a rollout with no progress for
    ``progressDeadlineSeconds`` since then is reported as ProgressDeadlineExceeded. The
    rollout itself goes on: the condition only tells clients it is stuck.
    """
    conditions: list[Obj] = status["conditions"]
    current = get_condition(conditions, PROGRESSING)
    name = new.name if new else dep["metadata"]["name"]
    if (
        current is not None
        and current.get("reason") == NEW_RS_AVAILABLE
        and status["replicas"] == status["updatedReplicas"]
    ):
        return None
    if deployment_complete(dep, d, status):
        set_condition(
            conditions,
            PROGRESSING,
            "True",
            NEW_RS_AVAILABLE,
            f'ReplicaSet "{name}" has successfully progressed.',
            now,
        )
        return None
    if current is None or made_progress(dep.get("status") or {}, status):
        set_condition(
            conditions,
            PROGRESSING,
            "True",
            RS_UPDATED,
            f'ReplicaSet "{name}" is progressing.',
            now,
            force=True,
        )
    current = get_condition(conditions, PROGRESSING)
    assert current is not None
    if current.get("reason") == TIMED_OUT:
        return None
    since = parse_time(current.get("lastUpdateTime"))
    if since is None:
        return None
    due = since + d.deadline
    if now >= due:
        set_condition(
            conditions,
            PROGRESSING,
            "False",
            TIMED_OUT,
            f'ReplicaSet "{name}" has timed out progressing.',
            now,
        )
        return None
    return due - now
