"""A Deployment's status: the counts, the Available and Progressing conditions, the progress
deadline, and the Events a reconcile reports.

Called by :func:`app.core.controllers.deployment.reconcile` once the ReplicaSets' sizes are
decided; reads the sizes and the ReplicaSets' observed status, writes nothing but the status
value it returns and the conditions list it is given.
"""

from __future__ import annotations

from app.core.controllers.deployment.replicasets import _RS, _Spec
from app.core.controllers.plan import Note, Obj, format_time, parse_time

PROGRESSING = "Progressing"
AVAILABLE = "Available"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
RS_UPDATED = "ReplicaSetUpdated"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"


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


def events(dep: Obj, replicasets: list[Obj], creates: tuple[Obj, ...],
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
