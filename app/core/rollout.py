"""A Deployment's rollouts as values: its revisions, undo, restart, pause, and how it is going.

``qm rollout`` (:mod:`app.cli.rollout`) and the web UI's workload pages
(:mod:`app.api.ui.pages.workloads`) steer rollouts the same way, so the rules live here once:
a revision is a ReplicaSet the Deployment controls, numbered by its
``deployment.kubernetes.io/revision`` annotation; undo puts an earlier revision's template
back (the previous one by default), which the Deployment controller treats as a new rollout
that reuses that ReplicaSet; restart stamps the template with ``quaymaster.io/restartedAt``
so every pod is replaced within the rollout's budget; pause and resume set ``spec.paused``.
Each change is a new Deployment object for a conditional replace, or ``None`` when there is
nothing to do. Pure: the callers read, write and retry; time is an argument.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.core.controllers.deployment.config import references
from app.core.controllers.deployment.replicasets import REVISION
from app.core.controllers.replicaset import TEMPLATE_HASH_LABEL
from app.core.objects import condition

CHANGE_CAUSE = "kubernetes.io/change-cause"
RESTARTED_AT = "quaymaster.io/restartedAt"
DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
Obj = dict[str, Any]


class NoSuchRevision(LookupError):
    """The revision asked for is not kept (or there is no previous one to go back to)."""


@dataclass(frozen=True)
class Revision:
    """One kept revision of a Deployment: its number and its ReplicaSet."""

    number: int
    replicaset: Obj

    @property
    def name(self) -> str:
        return str((self.replicaset.get("metadata") or {}).get("name", ""))

    @property
    def template(self) -> Obj:
        """The ReplicaSet's pod template as the Deployment would carry it."""
        return template_of(self.replicaset)

    @property
    def images(self) -> list[str]:
        containers = (self.template.get("spec") or {}).get("containers") or []
        return [str(c.get("image", "")) for c in containers if isinstance(c, dict)]

    @property
    def configs(self) -> list[tuple[str, str]]:
        """The ConfigMaps and Secrets its template reads, ``(kind, name)`` sorted."""
        return sorted(references(self.template))

    @property
    def change_cause(self) -> str:
        annotations = (self.replicaset.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(CHANGE_CAUSE, ""))

    @property
    def created(self) -> str:
        return str((self.replicaset.get("metadata") or {}).get("creationTimestamp", ""))

    @property
    def replicas(self) -> int:
        return int((self.replicaset.get("spec") or {}).get("replicas", 0) or 0)


def controlled_by(obj: Obj, uid: str) -> bool:
    """Whether ``obj``'s controller owner reference names ``uid``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs if isinstance(r, dict))


def revisions(dep: Obj, replicasets: Iterable[Obj]) -> list[Revision]:
    """The revisions of ``dep`` among ``replicasets`` (any others are skipped), oldest first."""
    uid = str((dep.get("metadata") or {}).get("uid", ""))
    out = []
    for rs in replicasets:
        if not controlled_by(rs, uid):
            continue
        annotations = (rs.get("metadata") or {}).get("annotations") or {}
        try:
            out.append(Revision(int(annotations.get(REVISION, "0")), rs))
        except ValueError:
            continue
    return sorted(out, key=lambda r: r.number)


def pick(kept: list[Revision], to_revision: int = 0) -> Revision:
    """Revision ``to_revision``, or the one before the newest when it is 0."""
    if to_revision:
        for r in kept:
            if r.number == to_revision:
                return r
        raise NoSuchRevision(f"revision {to_revision} not found")
    if len(kept) < 2:
        raise NoSuchRevision("there is no previous revision")
    return kept[-2]


def template_of(rs: Obj) -> Obj:
    """A copy of a ReplicaSet's pod template without its ``pod-template-hash`` label."""
    template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(TEMPLATE_HASH_LABEL, None)
    return template


def current_template(dep: Obj) -> Obj:
    return template_of(dep)


def rolled_back(dep: Obj, kept: list[Revision], to_revision: int = 0) -> Obj | None:
    """``dep`` with revision ``to_revision``'s template (the previous one when 0), or ``None``
    when it already runs that template; :class:`NoSuchRevision` when it is not kept."""
    template = pick(kept, to_revision).template
    if template == current_template(dep):
        return None
    out = copy.deepcopy(dep)
    out.setdefault("spec", {})["template"] = template
    return out


def restarted(dep: Obj, now: datetime) -> Obj:
    """``dep`` with its template stamped ``quaymaster.io/restartedAt`` = ``now``."""
    out = copy.deepcopy(dep)
    template = out.setdefault("spec", {}).setdefault("template", {})
    meta = template.setdefault("metadata", {})
    meta.setdefault("annotations", {})[RESTARTED_AT] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def with_paused(dep: Obj, paused: bool) -> Obj | None:
    """``dep`` paused (or resumed), or ``None`` when it already is."""
    if bool((dep.get("spec") or {}).get("paused")) == paused:
        return None
    out = copy.deepcopy(dep)
    out.setdefault("spec", {})["paused"] = paused
    return out


def stalled(dep: Obj) -> Obj:
    """The ``Progressing`` condition when the rollout has stalled (its progress deadline
    passed, or progressing is ``False`` for another reason), else ``{}``."""
    c = condition(dep, "Progressing")
    if c.get("reason") == DEADLINE_EXCEEDED or c.get("status") == "False":
        return c
    return {}


def rollout_state(dep: Obj) -> tuple[str, str]:
    """(``done`` | ``failed`` | ``waiting``, a line for people) for one read of the Deployment,
    by Kubernetes' rules: the status must describe the current generation first."""
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    name = dep["metadata"]["name"]
    if int(status.get("observedGeneration") or 0) < int(dep["metadata"].get("generation") or 0):
        return "waiting", f"Waiting for deployment {name!r} spec update to be observed..."
    if condition(dep, "Progressing").get("reason") == DEADLINE_EXCEEDED:
        return "failed", f"error: deployment {name!r} exceeded its progress deadline"
    want = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < want:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {updated} out of {want} new "
            "replicas have been updated..."
        )
    if total > updated:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {total - updated} old replicas "
            "are pending termination..."
        )
    if available < updated:
        return "waiting", (
            f"Waiting for deployment {name!r} rollout to finish: {available} of {updated} "
            "updated replicas are available..."
        )
    return "done", f"deployment {name!r} successfully rolled out"
