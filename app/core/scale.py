"""The ``scale`` subresource: a Deployment's, ReplicaSet's or Job's size as an
``autoscaling/v1`` ``Scale``, and a wanted size back as a patch of the object.

``kubectl scale`` (and autoscalers) speak ``Scale`` whatever the kind: ``spec.replicas`` is
the wanted size, ``status.replicas`` the current one and ``status.selector`` the label query
of the pods. A Job's size is its ``parallelism`` and its current size its active pods, as in
Kubernetes. The write is a merge patch of the object itself, so admission, policies and
conflicts are the object's own (ADR 0050). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core import errors

Obj = dict[str, Any]
SCALE_API_VERSION = "autoscaling/v1"


@dataclass(frozen=True)
class Scaled:
    """Where a kind keeps its wanted and its current size."""

    spec_field: str
    status_field: str


SCALED: dict[str, Scaled] = {
    "Deployment": Scaled("replicas", "replicas"),
    "ReplicaSet": Scaled("replicas", "replicas"),
    "Job": Scaled("parallelism", "active"),
}


def selector_string(selector: Any) -> str:
    """A ``LabelSelector`` as the label query string ``qm get -l`` and ``kubectl -l`` take."""
    if not isinstance(selector, dict):
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            continue
        key, op = expr.get("key"), expr.get("operator")
        values = ",".join(str(v) for v in expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({values})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def to_scale(kind: str, obj: Obj) -> Obj:
    """The ``Scale`` of ``obj`` (a kind in :data:`SCALED`)."""
    where = SCALED[kind]
    meta = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    wanted = spec.get(where.spec_field)
    return {
        "kind": "Scale",
        "apiVersion": SCALE_API_VERSION,
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": _int(wanted) if wanted is not None else 1},
        "status": {
            "replicas": _int(status.get(where.status_field)),
            "selector": selector_string(spec.get("selector")),
        },
    }


def wanted_replicas(scale: Any, name: str) -> int:
    """``spec.replicas`` of a ``Scale`` a client sent, or ``Invalid`` naming the field."""
    spec = scale.get("spec") if isinstance(scale, dict) else None
    value = spec.get("replicas") if isinstance(spec, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        cause = errors.Cause("spec.replicas", "FieldValueInvalid", "must be a non-negative integer")
        raise errors.invalid("Scale", name, [cause])
    return value


def object_patch(kind: str, replicas: int, resource_version: Any = None) -> Obj:
    """The merge patch that sets ``kind``'s size; a ``resourceVersion`` makes it conditional."""
    patch: Obj = {"spec": {SCALED[kind].spec_field: replicas}}
    if resource_version not in (None, ""):
        patch["metadata"] = {"resourceVersion": str(resource_version)}
    return patch
