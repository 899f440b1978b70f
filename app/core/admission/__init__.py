"""Admission: validate, default and normalise an object before it is stored.

``admit`` is the single gate every create and update passes through. It never trusts the
shape of its input: any wrong type, missing field or bad value becomes a ``Cause`` with the
JSON path of the field, and *all* causes are reported together in one 422 ``Invalid`` so a
user fixes a manifest in one round trip. On success it returns a new object with Kubernetes'
defaults filled in; the caller's dict is never modified.

What admission deliberately does *not* do (the API layer does, because it needs the store):
generate names from ``generateName``, resolve ``priorityClassName`` to ``spec.priority``,
assign ``uid`` / ``resourceVersion`` / ``generation`` / ``creationTimestamp``, and decide
whether a main-resource update may touch ``status``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

from app.core.admission._util import NOT_SUPPORTED, Errs, Obj, idx, sub, type_name
from app.core.admission.accounts import check_serviceaccount
from app.core.admission.config import check_configmap, check_secret
from app.core.admission.meta import carry_identity, check_metadata, object_name
from app.core.admission.misc import (
    check_event,
    check_lease,
    check_namespace,
    check_node,
    check_pdb,
    check_priorityclass,
    check_resourcequota,
)
from app.core.admission.network import check_endpointslice, check_service
from app.core.admission.pod import check_pod
from app.core.admission.policy import check_admissionpolicy
from app.core.admission.rbac import (
    check_clusterrole,
    check_clusterrolebinding,
    check_role,
    check_rolebinding,
)
from app.core.admission.values import check_object
from app.core.admission.workloads import (
    check_cronjob,
    check_deployment,
    check_job,
    check_replicaset,
)
from app.core.errors import BadRequest, Cause, RequestEntityTooLarge, invalid
from app.core.kinds import API_VERSION, Kind

DEFAULT_MAX_BYTES = 1_572_864
MAX_DEPTH = 100

Validator = Callable[[Errs, Obj, Obj | None], None]

VALIDATORS: dict[str, Validator] = {
    "Pod": check_pod,
    "Deployment": check_deployment,
    "ReplicaSet": check_replicaset,
    "Job": check_job,
    "CronJob": check_cronjob,
    "Service": check_service,
    "EndpointSlice": check_endpointslice,
    "PriorityClass": check_priorityclass,
    "ResourceQuota": check_resourcequota,
    "PodDisruptionBudget": check_pdb,
    "ConfigMap": check_configmap,
    "Secret": check_secret,
    "ServiceAccount": check_serviceaccount,
    "Event": check_event,
    "Node": check_node,
    "Lease": check_lease,
    "Namespace": check_namespace,
    "Role": check_role,
    "ClusterRole": check_clusterrole,
    "RoleBinding": check_rolebinding,
    "ClusterRoleBinding": check_clusterrolebinding,
    "AdmissionPolicy": check_admissionpolicy,
}

__all__ = ["DEFAULT_MAX_BYTES", "VALIDATORS", "admit"]


def _scan(obj: Obj) -> list[Cause]:
    """Find values JSON cannot represent (and absurd nesting) before anything else runs."""
    causes: list[Cause] = []
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while stack and len(causes) < 100:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            causes.append(
                Cause(path, "FieldValueInvalid", f"nested more than {MAX_DEPTH} levels deep")
            )
            break
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    causes.append(
                        Cause(
                            path,
                            "FieldValueTypeInvalid",
                            f"object keys must be strings, got {type_name(k)}",
                        )
                    )
                else:
                    stack.append((v, sub(path, k), depth + 1))
        elif isinstance(value, list):
            stack.extend((v, idx(path, i), depth + 1) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            causes.append(Cause(path, "FieldValueInvalid", "numbers must be finite"))
        elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
            causes.append(Cause(path, "FieldValueInvalid", "integers must fit in 64 bits"))
        elif value is not None and not isinstance(value, str | int | float | bool):
            causes.append(
                Cause(path, "FieldValueTypeInvalid", f"{type_name(value)} is not a JSON value")
            )
    return causes


def _strip_nulls(value: Any) -> Any:
    """Drop ``null`` object members: like Go decoding, ``"field": null`` means "unset"."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def encoded_size(obj: Any) -> int:
    """Size in bytes of the compact JSON encoding of ``obj``."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


def _check_type_meta(e: Errs, kind: Kind, obj: Obj) -> None:
    for field, expected in (("apiVersion", API_VERSION), ("kind", kind.kind)):
        value = obj.get(field)
        if value is None or value == "":
            obj[field] = expected
        elif value != expected:
            e.unsupported(field, value, (expected,))


def _check_fields(e: Errs, kind: Kind, obj: Obj) -> None:
    allowed = {"apiVersion", "kind", "metadata", *kind.spec_fields}
    if kind.has_status:
        allowed.add("status")
    for key in obj:
        if key not in allowed:
            e.add(sub("", key), NOT_SUPPORTED, f'unknown field "{key[:64]}" for kind {kind.kind}')


def admit(kind: Kind, obj: Any, old: Obj | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Obj:
    """Validate ``obj`` as a ``kind`` (``old`` is the stored object on update, else ``None``).

    Returns a new, defaulted object. Raises ``Invalid`` listing every problem found,
    ``RequestEntityTooLarge`` when the JSON encoding exceeds ``max_bytes``, or ``BadRequest``
    when ``obj`` is not an object at all.
    """
    if not isinstance(obj, dict):
        raise BadRequest(
            f"a {kind.kind} must be a JSON object, got {type_name(obj)}", kind=kind.kind
        )
    name = object_name(obj)
    causes = _scan(obj)
    if causes:
        raise invalid(kind.kind, name, causes)
    size = encoded_size(obj)
    if size > max_bytes:
        raise RequestEntityTooLarge(
            f"{kind.kind} {name or '(unnamed)'!r} is {size} bytes when encoded, more than the "
            f"limit of {max_bytes} bytes",
            kind=kind.kind,
            name=name,
        )
    new: Obj = _strip_nulls(obj)
    e = Errs()
    _check_type_meta(e, kind, new)
    _check_fields(e, kind, new)
    stored = old if isinstance(old, dict) else None
    if stored is not None:
        carry_identity(e, new, stored)
        if kind.has_status and new.get("status") is None and stored.get("status") is not None:
            new["status"] = copy.deepcopy(stored["status"])
    check_metadata(e, kind, new)
    if kind.has_status:
        check_object(e, new, "status", "")
    validator = VALIDATORS.get(kind.kind)
    if validator is not None:
        validator(e, new, stored)
    if e.causes:
        raise invalid(kind.kind, object_name(new) or name, e.causes)
    return new
