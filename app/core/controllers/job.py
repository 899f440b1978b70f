"""The Job controller: run pods from a template until ``completions`` of them succeed.

A Job may own 100,000 pods, so this core never sees them one by one: it reads a ``PodSummary``
(counts by state, and the sets of indexes for Indexed Jobs) that the shell computes in SQL, and
only the few pods a plan must delete. Pod creation is paced: at most ``create_batch`` pods per
reconcile, and only while fewer than ``pending_window`` of the Job's pods wait for a node, so the
store never holds more unplaced pods than the scheduler can soon place.

Failure accounting: only a pod that reached ``phase: Failed`` on its own counts against
``backoffLimit``. A pod the platform took away (condition ``DisruptionTarget=True``: preempted,
evicted, lost with its node) and a pod deleted before it finished are replaced, not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.controllers.job_status import (
    FAILED,
    condition,
    finish_time,
    format_indexes,
    parse_indexes,
    with_condition,
)
from app.core.controllers.plan import (
    Delete,
    Obj,
    Plan,
    delete_of,
    format_time,
    is_deleting,
    owner_reference,
    parse_time,
)
from app.core.kinds import API_VERSION

INDEX_KEY = "quaymaster.io/job-completion-index"
JOB_NAME_LABEL = "job-name"
CONTROLLER_UID_LABEL = "controller-uid"
CREATE_BATCH = 2000
PENDING_WINDOW = 4000
PACE_SECONDS = 0.25


@dataclass(frozen=True)
class PodSummary:
    """What the controller needs to know of a Job's pods, computed without loading them.

    ``active``: not deleting and not finished; ``ready`` and ``unbound`` (no node yet) are
    subsets of it. ``succeeded``: pods in phase Succeeded. ``failed``: pods that reached phase
    Failed with no ``DisruptionTarget`` condition; ``disrupted`` the Failed ones that carry it.
    ``terminating``: deleting and not finished. ``restarts``: container restarts summed over
    active pods (``restartPolicy: OnFailure`` retries in place). The index sets are those of
    Succeeded and of active pods (Indexed Jobs only).
    """

    active: int = 0
    ready: int = 0
    unbound: int = 0
    terminating: int = 0
    succeeded: int = 0
    failed: int = 0
    disrupted: int = 0
    restarts: int = 0
    succeeded_indexes: frozenset[int] = frozenset()
    active_indexes: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Limits:
    """How fast a Job may create pods (see the module docstring)."""

    create_batch: int = CREATE_BATCH
    pending_window: int = PENDING_WINDOW


def is_indexed(job: Obj) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def is_finished(job: Obj) -> bool:
    return finish_time(job.get("status") or {}) is not None


def is_suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def deletions_wanted(job: Obj, s: PodSummary, now: float) -> int:
    """How many active pods the next plan will delete: the shell loads that many candidates
    (unbound first, then not ready, newest first) and passes them to ``reconcile``."""
    if is_deleting(job):
        return 0
    decided = _verdict(job, s, now)
    if decided is not None or is_finished(job) or is_suspended(job):
        return s.active
    return max(0, s.active - _wanted_active(job, s))


def reconcile(
    job: Obj,
    s: PodSummary,
    candidates: list[Obj],
    now: float,
    limits: Limits = Limits(),
) -> Plan:
    """The writes that move ``job`` toward completion.

    ``candidates`` are active pods the shell loaded because ``deletions_wanted`` asked for
    them, in deletion order; the plan deletes at most ``limits.create_batch`` of them.
    """
    if is_deleting(job):
        return Plan()
    status = dict(job.get("status") or {})
    finished = is_finished(job)
    verdict = None if finished else _verdict(job, s, now)
    stopping = finished or verdict is not None or is_suspended(job)
    creates: tuple[Obj, ...] = ()
    deletes: tuple[Delete, ...] = ()
    requeue: float | None = None
    if stopping:
        deletes = tuple(delete_of(p) for p in candidates[: limits.create_batch])
    else:
        excess = s.active - _wanted_active(job, s)
        if excess > 0:
            deletes = tuple(delete_of(p) for p in candidates[: min(excess, limits.create_batch)])
        else:
            creates, more = _creates(job, s, -excess, limits)
            if more:  # at once while the window has room; else when the scheduler caught up
                room = limits.pending_window - s.unbound - len(creates)
                requeue = 0.0 if room > 0 else PACE_SECONDS
    if deletes and len(deletes) < s.active and stopping:
        requeue = PACE_SECONDS
    active = s.active + len(creates) - len(deletes)
    status.update(_counts(job, s, active))
    _times(job, status, s, now, stopping)
    if verdict is not None:
        reason, message = verdict
        status = with_condition(status, FAILED, reason, message, now)
    elif not finished and _complete(job, s) and active == 0:
        status = with_condition(status, "Complete", "", "", now)
        status["completionTime"] = format_time(now)
    status = _suspended_condition(job, status, now, finished or verdict is not None)
    requeue = _min(requeue, _timer(job, status, now))
    ttl_delete = _ttl_expired(job, status, now)
    if ttl_delete:
        deletes = (*deletes, delete_of(job))
    old = job.get("status") or {}
    return Plan(
        creates=creates,
        deletes=deletes,
        status=status if status != old else None,
        status_assumes_writes=True,
        requeue_after=None if ttl_delete else requeue,
    )


# ------------------------------------------------------------------------------ arithmetic


def _completions(job: Obj) -> int | None:
    value = (job.get("spec") or {}).get("completions")
    return None if value is None else int(value)


def _succeeded(job: Obj, s: PodSummary) -> int:
    """Succeeded so far: never less than what status already says, so a finished pod that
    vanished still counts."""
    if is_indexed(job):
        return len(_done_indexes(job, s))
    return max(int((job.get("status") or {}).get("succeeded") or 0), s.succeeded)


def _failed(job: Obj, s: PodSummary) -> int:
    return max(int((job.get("status") or {}).get("failed") or 0), s.failed)


def _done_indexes(job: Obj, s: PodSummary) -> set[int]:
    limit = _completions(job) or 0
    done = parse_indexes((job.get("status") or {}).get("completedIndexes") or "")
    return {i for i in done | s.succeeded_indexes if 0 <= i < limit}


def _wanted_active(job: Obj, s: PodSummary) -> int:
    """How many pods should be running now: ``parallelism``, capped by the work left."""
    parallelism = int((job.get("spec") or {}).get("parallelism", 1) or 0)
    completions = _completions(job)
    if completions is None:  # a work queue: once one pod succeeded, start no more
        return parallelism if _succeeded(job, s) == 0 else min(parallelism, s.active)
    return max(0, min(parallelism, completions - _succeeded(job, s)))


def _complete(job: Obj, s: PodSummary) -> bool:
    completions = _completions(job)
    if completions is None:
        return _succeeded(job, s) > 0
    return _succeeded(job, s) >= completions


def _failures(job: Obj, s: PodSummary) -> int:
    """What counts against ``backoffLimit``: pods that failed on their own, plus in-place
    restarts when the template restarts on failure."""
    template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    restarts = s.restarts if template_spec.get("restartPolicy") == "OnFailure" else 0
    return _failed(job, s) + restarts


def _verdict(job: Obj, s: PodSummary, now: float) -> tuple[str, str] | None:
    """Why the Job fails now, if it does: (reason, message)."""
    spec = job.get("spec") or {}
    if _complete(job, s):
        return None
    limit = int(spec.get("backoffLimit", 6))
    if _failures(job, s) > limit:
        return "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    deadline = _deadline(job)
    if deadline is not None and now >= deadline:
        return "DeadlineExceeded", "Job was active longer than specified deadline"
    return None


def _deadline(job: Obj) -> float | None:
    spec = job.get("spec") or {}
    seconds = spec.get("activeDeadlineSeconds")
    start = parse_time((job.get("status") or {}).get("startTime"))
    if seconds is None or start is None or is_suspended(job):
        return None
    return start + int(seconds)


def _creates(job: Obj, s: PodSummary, missing: int, limits: Limits) -> tuple[tuple[Obj, ...], bool]:
    """Up to ``missing`` new pods, paced; and whether more remain to create after them."""
    room = max(0, limits.pending_window - s.unbound)
    count = min(missing, limits.create_batch, room)
    if is_indexed(job):
        todo = _missing_indexes(job, s, missing)
        pods = tuple(new_pod(job, i) for i in todo[:count])
        return pods, len(todo) > len(pods)
    return tuple(new_pod(job, None) for _ in range(count)), missing > count


def _missing_indexes(job: Obj, s: PodSummary, limit: int) -> list[int]:
    """The lowest ``limit`` indexes that have neither succeeded nor an active pod."""
    taken = _done_indexes(job, s) | s.active_indexes
    out: list[int] = []
    for i in range(_completions(job) or 0):
        if len(out) >= limit:
            break
        if i not in taken:
            out.append(i)
    return out


def _counts(job: Obj, s: PodSummary, active: int) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "active": active,
        "ready": s.ready,
        "succeeded": _succeeded(job, s),
        "failed": _failed(job, s),
        "terminating": s.terminating,
    }
    if is_indexed(job):
        counts["completedIndexes"] = format_indexes(_done_indexes(job, s))
    return counts


def _times(job: Obj, status: Obj, s: PodSummary, now: float, stopping: bool) -> None:
    """``startTime`` is set when the Job first runs unsuspended; suspending clears it, so the
    deadline counts from the resumption, as in Kubernetes."""
    if is_suspended(job) and not is_finished(job):
        status.pop("startTime", None)
    elif not status.get("startTime") and not stopping:
        status["startTime"] = format_time(now)


def _suspended_condition(job: Obj, status: Obj, now: float, finished: bool) -> Obj:
    if is_suspended(job) and not finished:
        return with_condition(status, "Suspended", "JobSuspended", "Job suspended", now)
    cur = condition(status, "Suspended")
    if cur is not None and cur["status"] == "True":
        return with_condition(status, "Suspended", "JobResumed", "Job resumed", now, "False")
    return status


def _timer(job: Obj, status: Obj, now: float) -> float | None:
    """When time alone changes something: the active deadline, or the TTL after finishing."""
    done = finish_time(status)
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if done is not None:
        return None if ttl is None else max(0.0, done + int(ttl) - now)
    deadline = _deadline({**job, "status": status})
    return None if deadline is None else max(0.0, deadline - now)


def _ttl_expired(job: Obj, status: Obj, now: float) -> bool:
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    done = finish_time(status)
    return ttl is not None and done is not None and now >= done + int(ttl)


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


# ------------------------------------------------------------------------------ pods


def pod_labels(job: Obj, index: int | None) -> dict[str, str]:
    template = (job.get("spec") or {}).get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels[JOB_NAME_LABEL] = job["metadata"]["name"]
    labels[CONTROLLER_UID_LABEL] = str(job["metadata"]["uid"])
    if index is not None:
        labels[INDEX_KEY] = str(index)
    return labels


def new_pod(job: Obj, index: int | None) -> Obj:
    """A pod from the Job's template, owned by the Job; Indexed pods carry their index in a
    label and an annotation, and their name (``<job>-<index>-``)."""
    meta = job["metadata"]
    template = (job.get("spec") or {}).get("template") or {}
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    if index is not None:
        annotations[INDEX_KEY] = str(index)
    prefix = f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-"
    pod_meta: dict[str, Any] = {
        "generateName": prefix,
        "namespace": meta.get("namespace", ""),
        "labels": pod_labels(job, index),
        "ownerReferences": [owner_reference(job)],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": template.get("spec") or {},  # shared, not copied: the shell copies on write
    }


def events(job: Obj, plan: Plan) -> list[tuple[str, str, str]]:
    """The Events a plan is worth: (reason, message, type)."""
    out: list[tuple[str, str, str]] = []
    if plan.creates:
        out.append(("SuccessfulCreate", f"Created {len(plan.creates)} pods", "Normal"))
    pods_deleted = sum(1 for d in plan.deletes if d.kind == "Pod")
    if pods_deleted:
        out.append(("SuccessfulDelete", f"Deleted {pods_deleted} active pods", "Normal"))
    if plan.status is not None:
        old = job.get("status") or {}
        for kind in ("Complete", FAILED):
            new_c, old_c = condition(plan.status, kind), condition(old, kind)
            if new_c is not None and new_c["status"] == "True" and old_c != new_c:
                if kind == "Complete":
                    out.append(("Completed", "Job completed", "Normal"))
                else:
                    out.append((new_c["reason"], new_c["message"], "Warning"))
    return out
