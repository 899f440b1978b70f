"""The Deployment controller's working model: its spec as numbers, and its ReplicaSets as
sizes being decided.

:mod:`app.core.controllers.deployment` reads the stored objects into these values once per
reconcile; the scaling, rollout and status modules resize and read them; only at the end are
they rendered back into creates and updates. Every resize goes through :func:`scale_to`, which
records the Deployment size a ReplicaSet was sized for, so a later scaling event can be told
from rollout progress.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field

from app.core.controllers.plan import Obj, is_at_most_one, owner_reference, parse_time
from app.core.controllers.replicaset import TEMPLATE_HASH_LABEL
from app.core.kinds import API_VERSION

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"


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
