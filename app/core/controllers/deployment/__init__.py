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

The work is split by concern: :mod:`.replicasets` holds the model (the spec as numbers, the
ReplicaSets as sizes being decided), :mod:`.scaling` follows changes of ``spec.replicas``,
:mod:`.rollout` takes the RollingUpdate and Recreate steps and cleans up the history, and
:mod:`.status` computes the status, the conditions and the Events. This module is the entry
point the Deployment task (``workers.controllers.deployment``) calls.
"""

from __future__ import annotations

import copy
import dataclasses

from app.core.controllers.deployment.config import Configs, Pinned, pin, unused
from app.core.controllers.deployment.replicasets import (
    _RS,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    REVISION,
    _sizes,
    _Spec,
    resolve_fenceposts,
    scaled_value,
    split_new_and_old,
    template_hash,
)
from app.core.controllers.deployment.rollout import (
    history_to_delete,
    recreate_step,
    rolling_step,
)
from app.core.controllers.deployment.scaling import is_scaling_event, scale
from app.core.controllers.deployment.status import (
    AVAILABLE,
    FOUND_NEW_RS,
    NEW_RS_AVAILABLE,
    NEW_RS_CREATED,
    PAUSED,
    PROGRESSING,
    RESUMED,
    RS_UPDATED,
    TIMED_OUT,
    compute_status,
    deployment_complete,
    set_condition,
    sync_progress,
    track_pause,
)
from app.core.controllers.deployment.status import events as status_events
from app.core.controllers.plan import Delete, Obj, Plan, controller_uid, delete_of, is_deleting

__all__ = [
    "AVAILABLE",
    "DESIRED_REPLICAS",
    "FOUND_NEW_RS",
    "MAX_REPLICAS",
    "NEW_RS_AVAILABLE",
    "NEW_RS_CREATED",
    "PAUSED",
    "PROGRESSING",
    "RESUMED",
    "REVISION",
    "RS_UPDATED",
    "TIMED_OUT",
    "_Spec",
    "reconcile",
    "resolve_fenceposts",
    "scaled_value",
    "template_hash",
]


# Enough for any real sequence of steps (each one grows the new ReplicaSet or shrinks an old
# one); the bound only guards against a bug turning into an endless loop.
_MAX_STEPS = 100


def reconcile(
    dep: Obj, replicasets: list[Obj], pods: list[Obj], now: float, configs: Configs | None = None
) -> Plan:
    """The writes that move ``dep``'s ReplicaSets one step further and its new status.

    ``replicasets`` and ``pods`` are those of the Deployment's namespace (any superset of its
    own will do: ownership is by controller uid). Pods are read only by Recreate, which waits
    for the old ones to be gone. ``configs``: the ConfigMaps and Secrets the template
    references and the Deployment's snapshots of them (:mod:`.config`); the template is pinned
    to those snapshots before it is hashed, so a change of their content rolls out.
    """
    if is_deleting(dep):
        return Plan()
    d = _Spec.of(dep)
    owned = [
        rs
        for rs in replicasets
        if controller_uid(rs) == str(dep["metadata"]["uid"]) and not is_deleting(rs)
    ]
    pinned = Pinned(d.template)
    if configs is not None:
        newest = max((_RS.of(rs) for rs in owned), key=lambda r: r.revision, default=None)
        pinned = pin(dep, d.template, configs, newest.template if newest else None)
        d = dataclasses.replace(d, template=pinned.template)
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
    if configs is not None:
        gone = {x.uid for x in deletes}
        kept = [
            rs.template
            for rs in [new, *olds]
            if rs is not None and (rs.obj is None or rs.obj["metadata"]["uid"] not in gone)
        ]
        deletes += tuple(delete_of(s) for s in unused(configs, [d.template, *kept]))
    return Plan(
        creates=pinned.creates + creates,  # the snapshots first: the new pods read them
        deletes=deletes,
        updates=updates,
        status=status if status != (dep.get("status") or {}) else None,
        requeue_after=requeue,
        events=status_events(dep, replicasets, creates, updates, status),
    )
